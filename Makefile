# fedbook: `make book` builds the Jupyter Book, `make test` runs the test suite.
# Both create .venv and install the project on first use; later runs reinstall
# only when pyproject.toml changes (the stamp .venv/.installed records the install).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# The book's notebooks: `make test` executes each at smoke scale with papermill, then nbval re-runs the
# executed copies and compares the cells marked NBVAL_CHECK_OUTPUT.
NOTEBOOKS := $(sort $(wildcard notebooks/*.ipynb)) book/scoreboard.ipynb
NBVAL_DIR := _build/nbval
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

.PHONY: help book test bench clean browser-deps

help:
	@echo "make book   build the Jupyter Book into _build/html (sets up .venv if needed)"
	@echo "make test   run tests/, the notebooks at smoke scale under nbval, build the book and"
	@echo "            check every page in headless Chromium"
	@echo "            (pass PYTEST_ARGS=--runslow to include slow tests)"
	@echo "make bench  run the fedcore benchmarks"
	@echo "make clean  remove _build"

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -e '.[book,test]'
	touch $@

# Pages render from the committed results/ only (FEDBOOK_RENDER_ONLY): a build never trains.
# Sphinx re-reads a page, and jupyter-cache re-executes it, only when the page itself changed; but pages
# also read results/ (the scoreboard also its committed checkpoints: cells in progress), experiments/ and
# fedcore/. When any of those changed since the last good build, every page is executed and rendered again
# (about a minute).
BOOK_INPUTS := find results experiments fedcore -type f \( -name '*.json' -o -name '*.ckpt' -o -name '*.toml' \
               -o -name '*.py' \) \
               -print0 | sort -z | xargs -0 sha1sum | sha1sum
book: $(STAMP)
	@mkdir -p _build; inputs=$$($(BOOK_INPUTS)); all=; \
	if [ "$$inputs" != "$$(cat _build/.book-inputs 2>/dev/null)" ]; then rm -rf _build/.jupyter_cache; all=--all; fi; \
	FEDBOOK_RENDER_ONLY=1 $(VENV)/bin/jupyter-book build . -W -n --keep-going $$all && echo "$$inputs" > _build/.book-inputs

test: $(STAMP) browser-deps
	$(PY) -m pytest tests $(PYTEST_ARGS)
	rm -rf $(NBVAL_DIR) && mkdir -p $(NBVAL_DIR)
	for nb in $(NOTEBOOKS); do \
	    $(VENV)/bin/papermill --log-level WARNING -k python3 -p scale smoke $$nb $(NBVAL_DIR)/$$(basename $$nb) || exit 1; \
	done
	$(PY) -m pytest -p no:cacheprovider --nbval-lax $(NBVAL_DIR)
	$(MAKE) book
	$(PY) -m pytest tests/test_book_browser.py --browser

# Debian's Chromium for the browser tests (CI machines start without it).
browser-deps:
	@command -v chromium >/dev/null || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }

bench: $(STAMP)
	$(VENV)/bin/fedcore bench

clean:
	rm -rf _build
