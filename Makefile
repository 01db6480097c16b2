# Two commands do everything on a fresh machine with python3 and the package registry:
#   make demo   a diagnostics report on the bundled example model, with its TPU view
#   make test   the docs site built strictly, the whole test suite on the pinned environment, then the
#               compatibility suites on torch_xla 2.8 and on the newest torch without torch_xla, and the
#               TorchTPU suite
#   (make docs  the docs site alone, into docs/_build/html)
# Each creates (or reuses) the virtual environments it needs.

PYTHON ?= python3
VENV ?= .venv
VENV_XLA28 ?= .venv-xla28
VENV_TORCH_NEWEST ?= .venv-torch-newest
VENV_TORCHTPU ?= .venv-torchtpu
PY := $(VENV)/bin/python
STAMP := $(VENV)/.xlabridge-installed
STAMP_XLA28 := $(VENV_XLA28)/.xlabridge-installed
STAMP_TORCH_NEWEST := $(VENV_TORCH_NEWEST)/.xlabridge-installed
STAMP_TORCHTPU := $(VENV_TORCHTPU)/.xlabridge-installed
export PJRT_DEVICE ?= CPU

# The compatibility suites, chosen by path: the diagnostics, the backend (placement, forward-only
# path) and autocast. Real-model tests (marked slow) run in the pinned environment (torch 2.9) and,
# for torch 2.15, in the TorchTPU suite's own (Hugging Face's Trainer read from its trace among them).
# Tests that need torch_xla skip themselves, with the reason, where it is absent.
COMPAT_TESTS ?= tests/diagnostics tests/backend/test_backend.py tests/backend/test_path.py tests/autocast tests/upstream
COMPAT_PYTEST_ARGS ?= -m "not slow"

# The TorchTPU suite (torch 2.15 + torch-tpu + libtpu, no TPU here): what of TorchTPU runs
# without a chip, the report on its programs and the TPU view of the graphs Dynamo hands to backend="tpu",
# and the TPU view of any backend's run (inductor: tests/torchtpu/test_any_backend.py, whose inductor compiles
# of real models take most of its time: about 9 minutes on two cores, 10 more for its slow tests). Its
# real-model tests (slow) run too. tests/upstream calls every wrapper of a
# private upstream name here too, as in the other three environments. Its libtpu is the one that
# compiles for v7: the MXFP4 kernels' v7 compile (one kernel each) runs here.
TORCHTPU_TESTS ?= tests/torchtpu tests/upstream \
	tests/mx/test_mxfp4_mosaic.py::test_arrays_are_pinned_to_hbm_only_for_v7 \
	tests/mx/test_mxfp4_mosaic.py::test_v7_compiles_each_operation_to_one_kernel
TORCHTPU_PYTEST_ARGS ?=

.PHONY: venv venvs demo docs lint test test-pinned test-xla28 test-torch-newest test-torchtpu clean

venv: $(STAMP)
venvs: $(STAMP) $(STAMP_XLA28) $(STAMP_TORCH_NEWEST) $(STAMP_TORCHTPU)

# $(call install-venv,DIR,REQUIREMENTS,PIP ENVIRONMENT): the pinned packages, then xlabridge editable.
define install-venv
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(3) $(1)/bin/python -m pip install -q -r $(2)
	$(1)/bin/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $(1)/.xlabridge-installed
endef

$(STAMP): requirements/dev.txt pyproject.toml
	$(call install-venv,$(VENV),requirements/dev.txt,)

$(STAMP_XLA28): requirements/xla28.txt pyproject.toml
	$(call install-venv,$(VENV_XLA28),requirements/xla28.txt,)

# Some hosts cap torch below its newest release in a machine-wide pip constraint file; this
# install replaces that file with none, so the pins of requirements/torch-newest.txt decide.
$(STAMP_TORCH_NEWEST): requirements/torch-newest.txt pyproject.toml
	$(call install-venv,$(VENV_TORCH_NEWEST),requirements/torch-newest.txt,PIP_CONSTRAINT=/dev/null)

# The same replacement of the machine-wide constraint: torch-tpu 0.2.0 needs torch 2.11-2.15.
$(STAMP_TORCHTPU): requirements/torchtpu.txt pyproject.toml
	$(call install-venv,$(VENV_TORCHTPU),requirements/torchtpu.txt,PIP_CONSTRAINT=/dev/null)

# The report, with the TPU view: every XLA graph of the run compiled for a v5e:2x2 slice by libtpu
# on this machine after the run (nothing runs on a TPU).
DEMO_TPU ?= v5e:2x2

demo: $(STAMP)
	$(PY) -m xlabridge.cli report --tpu $(DEMO_TPU) --json xlabridge-demo.json --html xlabridge-demo.html -- $(PY) -m xlabridge.examples.demo

test: lint docs test-pinned test-xla28 test-torch-newest test-torchtpu

# The docs site (docs/: Sphinx, MyST Markdown, the API reference from the docstrings), built from
# scratch (-E) with every warning an error (-W; --keep-going lists them all first). Its code
# examples run in the pinned suite (tests/docs).
DOCS_OUT ?= docs/_build/html
docs: $(STAMP)
	$(PY) -m sphinx -b html -E -W --keep-going -q docs $(DOCS_OUT)

# pyflakes, first and in seconds: an undefined name in a slow test would otherwise fail the run
# 18 minutes in. Unused imports are allowed (some load a module for its registrations).
LINT_PATHS ?= xlabridge tests tools
lint: $(STAMP)
	@out="$$($(PY) -m pyflakes $(LINT_PATHS) 2>&1 | grep -v 'imported but unused')"; \
	if [ -n "$$out" ]; then echo "$$out"; echo "lint: pyflakes found the above"; exit 1; fi

test-pinned: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

test-xla28: $(STAMP_XLA28)
	$(VENV_XLA28)/bin/python -m pytest $(COMPAT_TESTS) $(COMPAT_PYTEST_ARGS) $(PYTEST_ARGS)

test-torch-newest: $(STAMP_TORCH_NEWEST)
	$(VENV_TORCH_NEWEST)/bin/python -m pytest $(COMPAT_TESTS) $(COMPAT_PYTEST_ARGS) $(PYTEST_ARGS)

test-torchtpu: $(STAMP_TORCHTPU)
	$(VENV_TORCHTPU)/bin/python -m pytest $(TORCHTPU_TESTS) $(TORCHTPU_PYTEST_ARGS) $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(VENV_XLA28) $(VENV_TORCH_NEWEST) $(VENV_TORCHTPU) build *.egg-info docs/_build
