# Two commands on a fresh machine: `make demo` and `make test` (both install first).
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_DIR ?= .demo
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install demo test lint bench clean

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -r requirements.txt -r requirements-dev.txt
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

install: $(STAMP)

demo: install
	@echo "== indexing the bundled samples/ into $(DEMO_DIR) =="
	$(BIN)/ragstream sync samples --data-dir $(DEMO_DIR)
	$(BIN)/ragstream status --data-dir $(DEMO_DIR)
	@echo "== watching samples/: edit, add or delete a file there (Ctrl-C to stop) =="
	$(BIN)/ragstream watch samples --data-dir $(DEMO_DIR)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: install lint
	$(BIN)/python -m pytest -q -p no:cacheprovider

bench: install
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/incremental.py

clean:
	rm -rf $(VENV) $(DEMO_DIR) .ragstream
