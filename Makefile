# Two commands do everything on a fresh machine with python3 and the package registry:
#   make demo   a diagnostics report on the bundled example model
#   make test   the whole test suite
# Both create (or reuse) the virtual environment in $(VENV).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.xlabridge-installed
export PJRT_DEVICE ?= CPU

.PHONY: venv demo test clean

venv: $(STAMP)

$(STAMP): requirements/dev.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements/dev.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m xlabridge.cli report --json xlabridge-demo.json --html xlabridge-demo.html -- $(PY) -m xlabridge.examples.demo

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
