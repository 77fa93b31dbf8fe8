"""Structured logs: one JSON line per request with its id, route, status, duration and agent, carried into
the Celery task the request queued; never a token, file content or query text."""

import io
import json
import logging
import time

import pytest
from django.test import Client

from indexing.models import IndexJob
from memoryhub import observability
from tests.indexing.test_worker import worker  # noqa: F401  (the real-worker fixture)

SECRET_CONTENT = "The vault code is quixotic-platypus-4471."
SECRET_QUERY = "where is the zanzibar-marmalade recipe"


@pytest.fixture
def json_log(settings):
    """Every record, formatted as settings.LOGGING formats it, collected as parsed lines."""
    config = observability.logging_config(log_format="json", level="INFO")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(config["formatters"]["memoryhub"]["()"]())  # the classes named in the config
    handler.addFilter(config["filters"]["route_not_path"]["()"]())
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)

    def lines() -> list[dict]:
        return [json.loads(line) for line in stream.getvalue().splitlines()]  # every line must be JSON

    lines.raw = stream.getvalue
    yield lines
    root.removeHandler(handler)
    root.setLevel(old_level)


def _requests(lines):
    return [line for line in lines() if line["logger"] == "memoryhub.requests"]


def test_json_is_the_default_log_format_and_text_can_be_chosen(settings):
    assert settings.MEMORYHUB_LOG_FORMAT == "json"
    assert settings.LOGGING["formatters"]["memoryhub"]["()"] is observability.JsonFormatter
    text = observability.logging_config(log_format="text", level="INFO")
    assert text["formatters"]["memoryhub"]["()"] is observability.TextFormatter


@pytest.mark.django_db
def test_each_request_is_logged_once_with_its_id_route_status_and_agent(alice, json_log, eager_tasks, fake_embeddings):
    response = alice.client.generic(
        "PUT", "/api/v1/files/memory/vault.md", SECRET_CONTENT.encode(), content_type="text/markdown",
        HTTP_X_REQUEST_ID="req-upload-1",
    )
    assert response.status_code == 201, response.content
    assert response["X-Request-ID"] == "req-upload-1"

    [line] = _requests(json_log)
    assert line["request_id"] == "req-upload-1"
    assert line["route"] == "api-file"  # the URL pattern's name, not the path
    assert line["method"] == "PUT" and line["status"] == 201
    assert line["agent_id"] == alice.agent.pk
    assert isinstance(line["duration_ms"], float) and line["duration_ms"] > 0
    assert "vault" not in json.dumps(line)


@pytest.mark.django_db
def test_logs_carry_no_token_content_or_query(alice, json_log, eager_tasks, fake_embeddings, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        alice.client.generic("PUT", "/api/v1/files/memory/vault.md", SECRET_CONTENT.encode(), content_type="text/markdown")
    response = alice.client.post("/api/v1/search", {"query": SECRET_QUERY}, format="json")
    assert response.status_code == 200
    alice.client.credentials(HTTP_AUTHORIZATION="Bearer mh_" + "x" * 43)  # an unknown token: a 401 line
    assert alice.client.get("/api/v1/files").status_code == 401

    raw = json_log.raw()
    assert [line["status"] for line in _requests(json_log)] == [201, 200, 401]
    assert any(line["logger"] == "memoryhub.tasks" for line in json_log())  # the eager indexing task
    for secret in (alice.raw_token, "x" * 43, "quixotic", "platypus", "zanzibar", "marmalade", "vault.md"):
        assert secret not in raw


@pytest.mark.parametrize("token_in", ["header", "url"])
def test_an_mcp_request_is_logged_with_its_agent(alice, json_log, token_in):
    """The MCP endpoint authenticates by itself (not through DRF), and its request line said agent_id null."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    headers = {"HTTP_ACCEPT": "application/json, text/event-stream"}
    if token_in == "header":
        response = alice.client.post("/mcp", body, content_type="application/json", **headers)
    else:
        anonymous = Client()
        response = anonymous.post(f"/mcp/{alice.raw_token}", body, content_type="application/json", **headers)
    assert response.status_code == 200, response.content
    [line] = _requests(json_log)
    assert line["route"] == ("mcp" if token_in == "header" else "mcp-url")
    assert line["agent_id"] == alice.agent.pk
    assert alice.raw_token not in json_log.raw()


@pytest.mark.django_db
def test_a_request_id_that_is_not_sane_is_replaced(anonymous_client, json_log):
    response = anonymous_client.get("/healthz", HTTP_X_REQUEST_ID="bad id\nwith a newline " + "y" * 200)
    generated = response["X-Request-ID"]
    assert len(generated) == 32 and generated.isalnum()
    [line] = _requests(json_log)
    assert line["request_id"] == generated and line["route"] == "healthz"


@pytest.mark.django_db
def test_an_unknown_url_is_logged_without_its_path(anonymous_client, json_log):
    assert anonymous_client.get("/no/such/secret-path").status_code == 404
    [line] = _requests(json_log)
    assert line["route"] == "unmatched" and line["status"] == 404
    assert "secret-path" not in json_log.raw()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_the_worker_logs_the_request_id_of_the_upload_that_queued_its_task(alice, worker, settings):  # noqa: F811
    process, log = worker
    settings.MEMORYHUB_EMBEDDING_PROVIDER = "fake"
    settings.MEMORYHUB_EMBEDDING_MODEL = "fake-hash"
    settings.MEMORYHUB_EMBEDDING_DIMENSIONS = 64
    response = alice.client.generic(
        "PUT", "/api/v1/files/memory/vault.md", SECRET_CONTENT.encode(), content_type="text/markdown",
        HTTP_X_REQUEST_ID="req-from-upload-42",
    )
    assert response.status_code == 201, response.content
    job_id = response.json()["job"]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and process.poll() is None:
        if IndexJob.objects.get(pk=job_id).state in ("done", "failed"):
            break
        time.sleep(0.3)
    assert IndexJob.objects.get(pk=job_id).state == "done"
    deadline = time.monotonic() + 30  # the task line is written just after the job row
    while '"memoryhub.tasks"' not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)

    raw = log.read_text()
    parsed = []
    for text in raw.splitlines():
        try:
            parsed.append(json.loads(text))
        except ValueError:
            continue  # Celery's start-up banner is plain text
    task_lines = [line for line in parsed if line.get("logger") == "memoryhub.tasks"]
    assert task_lines, f"no task line in the worker log:\n{raw[-3000:]}"
    assert task_lines[0]["request_id"] == "req-from-upload-42"
    assert task_lines[0]["task"] == "indexing.tasks.index_job_task" and task_lines[0]["state"] == "SUCCESS"
    assert "quixotic" not in raw and alice.raw_token not in raw


@pytest.mark.django_db
def test_a_server_error_is_logged_with_its_route_not_its_path(alice, json_log, monkeypatch):
    from indexing import apis

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(apis, "file_ingest", broken)
    alice.client.raise_request_exception = False
    response = alice.client.generic("PUT", "/api/v1/files/memory/secret-plans.md", b"x", content_type="text/markdown")
    assert response.status_code == 500
    [error] = [line for line in json_log() if line["logger"] == "django.request"]
    assert error["message"] == "Internal Server Error: api-file"
    [traceback] = [line for line in json_log() if "exception" in line]  # the API's own error line
    assert "RuntimeError: boom" in traceback["exception"] and traceback["request_id"] == response["X-Request-ID"]
    assert "secret-plans" not in json_log.raw()


@pytest.mark.django_db(transaction=True)  # the server reads the token from the committed rows
def test_gunicorns_text_access_log_does_not_write_an_mcp_urls_token(alice, tmp_path):
    """Plain-text logs keep gunicorn's access line; an MCP client without headers has its token in the URL
    (/mcp/<token>), which that line printed whole until memoryhub/gunicorn_logging.py."""
    import sys
    import urllib.request

    from tests.reliability.processes import Process, free_port, service_env, unique_queue, wait_for, web_answers

    port = free_port()
    env = service_env(queue=unique_queue(), MEMORYHUB_LOG_FORMAT="text", MEMORYHUB_WEB_WORKERS=1, DEBUG="0",
                      SECRET_KEY="test-only-secret-key-for-the-access-log")
    server = Process(
        [sys.executable, "-m", "gunicorn", "-c", "python:memoryhub.gunicorn_conf", "--bind", f"127.0.0.1:{port}",
         "memoryhub.wsgi:application"],
        env, tmp_path / "gunicorn.log",
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: web_answers(url), timeout=60, what="gunicorn")
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
        request = urllib.request.Request(
            f"{url}/mcp/{alice.raw_token}", data=body, method="POST",
            headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
            assert "memory_search" in response.read().decode()
        wait_for(lambda: "POST /mcp/" in server.log.read_text(), timeout=10, what="the access line")
    finally:
        server.stop()
    log = server.log.read_text()
    assert '"POST /mcp/<token> HTTP/1.1" 200' in log
    assert alice.raw_token not in log
