# The two commands: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# TensorFlow's C++ logging is noise for a person reading the demo.
export TF_CPP_MIN_LOG_LEVEL := 2

.PHONY: demo test lint format install clean

$(STAMP): requirements.txt requirements-test.txt setup.cfg
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -r requirements-test.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# Pretrains BERT-Tiny on the built-in corpus (learning its vocab once), then
# shows held-out accuracy against baselines and fill-mask guesses. Running it
# again resumes from, or reports on, demo_out.
demo: $(STAMP)
	$(PY) -m bertjax.main --config experiments/pretrain/tiny_cpu.py --workdir demo_out \
		--fill_mask_examples 5

lint: $(STAMP)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

test: lint
	$(PY) -m pytest -n 2 --durations=15 tests

clean:
	rm -rf $(VENV) demo_out .pytest_cache .ruff_cache
