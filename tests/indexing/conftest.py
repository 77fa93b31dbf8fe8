"""Indexing tests run tasks eagerly (in the test process) with the counting fake embedding provider.

``indexed()`` runs the on-commit callbacks of its block, which is where uploads enqueue their jobs:
``with indexed(): alice.client.put(...)`` returns with the file indexed (or failed).
"""

import pytest

from indexing.embeddings import FakeProvider
from memoryhub.celery import app as celery_app


@pytest.fixture(autouse=True)
def eager_tasks():
    """Celery reads its configuration once, so the eager switch is set on the app itself."""
    old = celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates
    celery_app.conf.task_always_eager = True
    # Not propagating lets eager retries run as they would on a worker; tests assert the job's state.
    celery_app.conf.task_eager_propagates = False
    yield
    celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates = old


@pytest.fixture
def fake_embeddings(settings):
    settings.MEMORYHUB_EMBEDDING_PROVIDER = "fake"
    settings.MEMORYHUB_EMBEDDING_MODEL = "fake-hash"
    settings.MEMORYHUB_EMBEDDING_DIMENSIONS = 64
    FakeProvider.reset_counts()
    yield FakeProvider
    FakeProvider.reset_counts()


@pytest.fixture
def indexed(django_capture_on_commit_callbacks):
    return lambda: django_capture_on_commit_callbacks(execute=True)
