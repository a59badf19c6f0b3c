# The two commands of the quick start: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv demo test test-slow clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

# ResNet-50 (random weights, batch 1) compiled by taskloom, timed next to PyTorch eager.
demo: venv
	$(VENV)/bin/taskloom bench model resnet50 --compare torch

# pytest exits 5 when it collects no test; that is not a failure of the suite.
# Tests marked slow (the full ONNX conformance run, whole models) run with `make test-slow`.
test: venv
	$(PY) -m pytest -q -n auto -m "not slow" tests || [ $$? -eq 5 ]

test-slow: venv
	$(PY) -m pytest -q -n auto -m slow tests || [ $$? -eq 5 ]

clean:
	rm -rf $(VENV) build *.egg-info
