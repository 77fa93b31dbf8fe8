"""/readyz: ready only when a worker consumes the index queue; it says how deep that queue is."""

import time
import uuid

import pytest
import redis
from django.conf import settings as django_settings

from indexing.tasks import index_job_task
from memoryhub.celery import app as celery_app
from tests.indexing.test_worker import redis_or_skip, worker  # noqa: F401  (the real-worker fixture)


@pytest.fixture
def lonely_queue(monkeypatch, settings):
    """The index queue is one no worker consumes, with two messages waiting in it and one in its
    background queue."""
    redis_or_skip()
    settings.CELERY_TASK_ALWAYS_EAGER = False
    queue = f"memoryhub-test-{uuid.uuid4().hex[:12]}"
    monkeypatch.setattr(index_job_task._get_current_object(), "queue", queue, raising=False)
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    client.rpush(queue, b"{}", b"{}")
    client.rpush(f"{queue}.background", b"{}")
    yield queue
    client.delete(queue, f"{queue}.background")


@pytest.mark.django_db
def test_readyz_is_unavailable_without_a_worker_and_reports_the_queue_depth(anonymous_client, lonely_queue, settings):
    settings.MEMORYHUB_READYZ_TIMEOUT = 0.3
    response = anonymous_client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable", "database": "ok", "worker": "none", "workers": 0, "queue_depth": 2,
        "background_queue_depth": 1,
    }


@pytest.mark.django_db
def test_readyz_is_unavailable_when_no_worker_reads_the_background_queue(anonymous_client, lonely_queue, settings, monkeypatch):
    from memoryhub import observability

    # Workers started with --queues naming the main queue only: re-indexing would never run.
    monkeypatch.setattr(observability, "workers_consuming", lambda *, queues, timeout: {queues[0]: 2, queues[1]: 0})
    response = anonymous_client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable", "database": "ok", "worker": "no background worker", "workers": 2, "queue_depth": 2,
        "background_queue_depth": 1,
    }


@pytest.mark.django_db
def test_readyz_is_unavailable_when_the_broker_is_unreachable(anonymous_client, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    old = celery_app.conf.broker_url
    celery_app.conf.broker_url = "redis://:hunter2@127.0.0.1:1/0"
    started = time.monotonic()
    try:
        response = anonymous_client.get("/readyz")
    finally:
        celery_app.conf.broker_url = old
    assert time.monotonic() - started < 3  # one connection attempt, not a worker's retries (6 s)
    assert response.status_code == 503
    assert response.json()["worker"] == "broker unreachable"
    assert "hunter2" not in response.content.decode()


@pytest.mark.django_db
def test_readyz_is_ready_in_process_when_tasks_run_eagerly(anonymous_client, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    response = anonymous_client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["worker"] == "in-process"


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_readyz_is_ready_when_a_worker_consumes_the_index_queue(anonymous_client, worker, settings):  # noqa: F811
    process, log = worker
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.MEMORYHUB_READYZ_TIMEOUT = 1.0
    # The worker needs a moment to start consuming: poll like a load balancer would.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        response = anonymous_client.get("/readyz")
        if response.status_code == 200:
            break
    assert response.status_code == 200, f"{response.json()}; worker log:\n{log.read_text()[-2000:]}"
    assert response.json() == {
        "status": "ok", "database": "ok", "worker": "ok", "workers": 1, "queue_depth": 0, "background_queue_depth": 0,
    }


def test_healthz_stays_cheap_and_does_not_ask_the_workers(anonymous_client, settings, monkeypatch, db):
    from memoryhub import observability

    def fail(**kwargs):
        raise AssertionError("/healthz must not broadcast to workers")

    monkeypatch.setattr(observability, "workers_consuming", fail)
    settings.CELERY_TASK_ALWAYS_EAGER = True
    assert anonymous_client.get("/healthz").status_code == 200
