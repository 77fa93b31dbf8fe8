from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def create_agent(*args) -> str:
    out = StringIO()
    call_command("create_agent", *args, stdout=out)
    return out.getvalue()


def test_the_last_line_is_a_working_read_write_token():
    token = create_agent("demo2").strip().splitlines()[-1]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = client.get("/api/v1/status")
    assert response.status_code == 200
    assert response.json()["agent"] == "demo2"


def test_an_existing_slug_is_refused_unless_asked():
    create_agent("demo2")
    with pytest.raises(CommandError, match="already exists"):
        create_agent("demo2")
    first, second = create_agent("demo2", "--existing-ok").splitlines()[-1], create_agent("demo2", "--existing-ok").splitlines()[-1]
    assert first != second


def test_an_invalid_slug_is_refused():
    with pytest.raises(CommandError, match="not a valid slug"):
        create_agent("Not A Slug")


def test_rotate_revokes_the_earlier_tokens_with_the_same_label_only():
    first = create_agent("demo2", "--label", "make run").splitlines()[-1]
    other = create_agent("demo2", "--existing-ok", "--label", "laptop").splitlines()[-1]
    output = create_agent("demo2", "--existing-ok", "--label", "make run", "--rotate")
    second = output.splitlines()[-1]
    assert f"Revoked 1 earlier token(s) labelled 'make run': {first[:11]}…" in output
    client = APIClient()
    answers = {}
    for name, token in [("first", first), ("other", other), ("second", second)]:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        answers[name] = client.get("/api/v1/status").status_code
    assert answers == {"first": 401, "other": 200, "second": 200}


def test_rotate_on_a_new_agent_revokes_nothing():
    output = create_agent("demo3", "--existing-ok", "--label", "make run", "--rotate")
    assert "Created agent 'demo3'" in output and "Revoked" not in output
