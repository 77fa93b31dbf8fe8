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
