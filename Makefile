# tfyard: `make demo` trains on the bundled digits; `make test` runs the whole suite.
# The demo installs the package alone; tests, lint and benchmarks add every extra.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
VERSION := $(shell cat pyproject.toml | cksum | cut -d' ' -f1)
PACKAGE := $(VENV)/.installed-package-$(VERSION)
EVERYTHING := $(VENV)/.installed-everything-$(VERSION)
PYTEST_ARGS ?=

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(PACKAGE): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e .
	rm -f $(VENV)/.installed-package-* && touch $@

$(EVERYTHING): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,spark,ray,dev,parquet]'
	rm -f $(VENV)/.installed-* && touch $(PACKAGE) $@

demo: $(PACKAGE)
	$(BIN)/tfyard demo

lint: $(EVERYTHING)
	$(BIN)/ruff check src tests examples benchmarks

test: lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(EVERYTHING)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) output .pytest_cache .ruff_cache
