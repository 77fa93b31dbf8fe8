import pytest

pytestmark = pytest.mark.django_db


def test_healthz_reports_database_and_broker_without_authentication(anonymous_client, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    response = anonymous_client.get("/healthz")
    body = response.json()
    assert body["database"] == "ok"
    assert body["broker"] in {"ok", "unreachable"}
    assert response.status_code == (200 if body["broker"] == "ok" else 503)


def test_healthz_says_when_tasks_run_in_process(anonymous_client, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    response = anonymous_client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "broker": "in-process"}


def test_healthz_names_no_versions_or_secrets(anonymous_client, settings):
    settings.CELERY_BROKER_URL = "redis://:hunter2@127.0.0.1:1/0"
    settings.CELERY_TASK_ALWAYS_EAGER = False
    response = anonymous_client.get("/healthz")
    assert response.status_code == 503
    text = response.content.decode()
    assert "hunter2" not in text and "6379" not in text and "PostgreSQL" not in text
    assert response.json()["broker"] == "unreachable"
