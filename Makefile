# Quick start: `make demo` and `make test` (each installs into .venv first if needed).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test demo bench lint clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[all,dev]'
	touch $(STAMP)

test: install
	$(PY) -m pytest tests

demo: install
	$(PY) examples/demo.py

bench: install
	$(PY) benchmarks/bench.py
	$(PY) benchmarks/watchdog_cost.py

lint: install
	$(PY) -m ruff check jaxload tests examples

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
