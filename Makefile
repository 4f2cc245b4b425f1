# Set-up is part of every target: a fresh machine needs only Python 3.11, pip and make.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/twin run --out runs/default

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -q

bench: $(STAMP)
	OPENBLAS_NUM_THREADS=1 $(BIN)/twin bench all

clean:
	rm -rf $(VENV) runs .mypy_cache .pytest_cache .ruff_cache
