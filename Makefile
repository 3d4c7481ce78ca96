# fedbook: `make book` builds the Jupyter Book, `make test` runs the test suite.
# Both create .venv and install the project on first use; later runs reinstall
# only when pyproject.toml changes (the stamp .venv/.installed records the install).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# Notebooks executed and checked by nbval during `make test` (space-separated .ipynb paths).
NBVAL_NOTEBOOKS ?=
# Extra arguments for pytest, e.g. `make test PYTEST_ARGS=--runslow`.
PYTEST_ARGS ?=

# Offline datasets live beside the repository; use them unless FEDCORE_DATA is already set.
# The path is made absolute because notebooks execute from their own folder.
ifeq ($(origin FEDCORE_DATA),undefined)
ifneq ($(wildcard ../shared/data),)
FEDCORE_DATA := $(abspath ../shared/data)
endif
endif
export FEDCORE_DATA

.PHONY: help book test bench clean

help:
	@echo "make book   build the Jupyter Book into _build/html (sets up .venv if needed)"
	@echo "make test   run the tests in tests/ and the notebooks in NBVAL_NOTEBOOKS"
	@echo "            (pass PYTEST_ARGS=--runslow to include slow tests)"
	@echo "make bench  run the fedcore benchmarks"
	@echo "make clean  remove _build"

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -e '.[book,test]'
	touch $@

book: $(STAMP)
	$(VENV)/bin/jupyter-book build . -W -n --keep-going

test: $(STAMP)
	$(PY) -m pytest tests $(if $(strip $(NBVAL_NOTEBOOKS)),--nbval-lax $(NBVAL_NOTEBOOKS)) $(PYTEST_ARGS)

bench: $(STAMP)
	$(VENV)/bin/fedcore bench

clean:
	rm -rf _build
