# The two commands of rlops: `make demo` and `make test`. Each creates .venv with the pinned
# dependency set (requirements/lock.txt) when it is missing.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow lint docs docs-reference bench venv clean params-schema up down

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
	$(MAKE) docs

# The documentation site (mkdocs.yml, docs/), built offline: any warning (a broken link or anchor) fails.
# tests/test_docs.py checks the nav, the commands and imports the pages show, and the generated pages.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# Rewrite the generated pages: the CLI and params references, the benchmark table.
docs-reference: $(STAMP)
	$(PY) tools/docs_reference.py
	$(PY) bench/results_table.py

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

# The JSON Schema of params.yaml (editors complete and check it), generated from the typed model.
params-schema: $(STAMP)
	$(VENV)/bin/rlops config schema

bench: $(STAMP)
	$(PY) bench/env_throughput.py

clean:
	rm -rf $(VENV) rlops-data site
