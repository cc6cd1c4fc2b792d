# Quick start: `make demo` and `make test` (each installs into .venv first if needed).
# Current JAX needs Python >= 3.12: the newest one on the machine is used (tools/find_python.sh),
# or PYTHON=/path/to/python. `make test-oldest` runs the suite on the oldest supported versions
# (pyproject.toml's floors, pinned in constraints-oldest.txt) on Python 3.11, `make test-matrix`
# the backends' tests on every TensorFlow and Grain release in between, `make test-install` the
# quick start from the built wheel in a fresh environment.
PYTHON ?= $(shell tools/find_python.sh)
OLDEST_PYTHON ?= $(shell command -v python3.11 || echo python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
OLDEST_VENV := .venv-oldest
OLDEST_STAMP := $(OLDEST_VENV)/.installed

.PHONY: install test test-fast test-oldest test-matrix test-install demo bench lint docs doctest clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -n "$(PYTHON)" || { tools/find_python.sh; exit 1; }
	@# a .venv of an older Python (before JAX 0.12) is rebuilt
	test -x $(PY) && $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 12))' || \
		{ rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[all,dev,docs]'
	touch $(STAMP)

# the test suite, then the docstrings' examples. Two pytest-xdist workers: one runs every test on
# the warm clusters (tests/conftest.py groups them), the other the tests with processes of their
# own, which mostly wait
test: install
	$(PY) -m pytest -n 2 --dist loadgroup --durations=15 tests
	$(PY) -m pytest -q --doctest-modules jaxload

# the tests that start no processes (unit tests, simulated topologies and stores): under a minute
test-fast: install
	$(PY) -m pytest -m "not cluster" -q tests

$(OLDEST_STAMP): pyproject.toml constraints-oldest.txt
	test -x $(OLDEST_VENV)/bin/python || $(OLDEST_PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(OLDEST_VENV)/bin/python -m pip install --quiet -c constraints-oldest.txt -e '.[all,dev,docs]'
	touch $(OLDEST_STAMP)

test-oldest: $(OLDEST_STAMP)
	$(OLDEST_VENV)/bin/python -m pytest -n 2 --dist loadgroup tests
	$(OLDEST_VENV)/bin/python -m pytest -q --doctest-modules jaxload

# the tf.data tests on each tensorflow-cpu minor release and the Grain tests on each grain
# release, floor to newest, one line per version (environments kept in .venv-matrix/)
test-matrix:
	tools/test_matrix.sh

# the wheel, installed with [tf,grain] into a fresh environment (build/install/), runs
# examples/quickstart.py under `jaxload launch -n 2`
test-install:
	PYTHON=$(PYTHON) tools/test_install.sh

demo: install
	$(PY) examples/demo.py

bench: install
	$(PY) benchmarks/bench.py
	$(PY) benchmarks/watchdog_cost.py
	$(PY) benchmarks/head_start.py
	$(PY) benchmarks/schedule_cost.py
	$(PY) benchmarks/tf_files.py
	$(PY) benchmarks/tf_memory.py
	$(PY) benchmarks/group_proof.py
	$(PY) benchmarks/stream_proof.py
	$(PY) benchmarks/step_cost.py
	$(PY) benchmarks/order_check.py
	$(PY) benchmarks/tf_decoded_shuffle.py
	$(PY) benchmarks/tf_build.py
	$(PY) benchmarks/matrix.py

lint: install
	$(PY) -m ruff check jaxload tests examples
	$(PY) -m mypy

# the API reference from the docstrings, into site/ (open site/index.html; works offline)
docs: install
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

# the docstrings' examples, in one process with 8 fake CPU devices (conftest.py)
doctest: install
	$(PY) -m pytest --doctest-modules jaxload

clean:
	rm -rf $(VENV) $(OLDEST_VENV) .venv-matrix .pytest_cache build *.egg-info site
