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

# Until the training loop lands, the demo is the data side end to end: learn a
# WordPiece vocab from the built-in corpus, build masked batches, show them.
demo: $(STAMP)
	$(PY) -m data_pipeline.inspect --config experiments/pretrain/tiny_cpu.py \
		--config.data.vocab_cache_dir=demo_out --num_batches 40 --num_examples 3 \
		--dump demo_out/examples.jsonl

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
