# The two commands of rlops: `make demo` and `make test`. Each creates .venv with the pinned
# dependency set (requirements/lock.txt) when it is missing.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow lint bench venv clean params-schema up down

venv: $(STAMP)

$(STAMP): requirements/lock.txt setup.cfg
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements/lock.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(PY) -m rlops.pipeline_steps.drift.ks_kernels  # compile the drift kernels into their cache
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/rlops demo

# The one-machine deployment: a real Airflow scheduler, an MLflow server, the receiver, the console.
up: $(STAMP)
	$(VENV)/bin/rlops stack up

down: $(STAMP)
	$(VENV)/bin/rlops stack down

# lint first: a style or type error fails in seconds, before the suite's minutes
test: lint
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

# The JSON Schema of params.yaml (editors complete and check it), generated from the typed model.
params-schema: $(STAMP)
	$(VENV)/bin/rlops config schema

bench: $(STAMP)
	$(PY) bench/env_throughput.py

clean:
	rm -rf $(VENV) rlops-data
