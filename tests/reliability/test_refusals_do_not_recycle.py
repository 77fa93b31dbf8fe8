"""A flood of refused requests does not recycle the web workers: gunicorn restarts a worker after
max_requests requests, and a client that ignores its waits sends hundreds of 429s a second, which
restarted every worker each few seconds at the expense of every tenant on it. Refusals are not counted
(memoryhub/gunicorn_conf.py post_request); requests that did work still are."""

import importlib
import json
import os
from types import SimpleNamespace

import pytest

from tests.reliability.test_load_server import _status, start_gunicorn

MAX_REQUESTS = 10


@pytest.mark.parametrize("status, counted", [(429, 4), (200, 5), (503, 5), (None, 5)])
def test_only_a_refusal_is_taken_off_the_count(status, counted, monkeypatch):
    # Importing the config sets the pool size for gunicorn's workers in os.environ: keep it out of this
    # process's environment, which the other tests' servers inherit.
    monkeypatch.setattr(os, "environ", os.environ.copy())
    gunicorn_conf = importlib.import_module("memoryhub.gunicorn_conf")
    worker = SimpleNamespace(nr=5)  # gunicorn counted the request before the app ran
    response = None if status is None else SimpleNamespace(status_code=status)
    gunicorn_conf.post_request(worker, req=None, environ={}, resp=response)
    assert worker.nr == counted


@pytest.mark.django_db(transaction=True)
def test_refused_requests_do_not_restart_the_worker_and_served_ones_still_do(alice, tmp_path):
    process, url = start_gunicorn(
        tmp_path, "--max-requests", str(MAX_REQUESTS), "--max-requests-jitter", "0",
        MEMORYHUB_WEB_WORKERS=1, MEMORYHUB_RATE_LIMIT_SEARCH="1/min", MEMORYHUB_LOG_FORMAT="text",
    )
    try:
        body = json.dumps({"query": "spare key"}).encode()
        answers = [_status(f"{url}/api/v1/search", alice.raw_token, body) for _ in range(4 * MAX_REQUESTS)]
        assert answers[0] == 200 and set(answers[1:]) == {429}, answers
        process.output()  # flushes the log
        assert "Autorestarting worker" not in process.log.read_text()

        for _ in range(MAX_REQUESTS):  # requests served: they count, and the worker is recycled
            assert _status(f"{url}/healthz") == 200
        process.output()
        assert "Autorestarting worker" in process.log.read_text()
    finally:
        process.stop()
