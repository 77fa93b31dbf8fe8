"""The admin's search playground: memory_search for one agent, with scores, cited lines, snippets and
the explain fields, and bad input shown as a message rather than an error page."""

import pytest
from django.contrib.auth.models import User

pytestmark = pytest.mark.django_db

TRIP = "# Trips\n\nWe flew to Lisbon in May.\n\nAlice ate pastel de nata every morning.\n"


@pytest.fixture
def operator(client):
    User.objects.create_superuser("operator", "op@example.com", "pw")
    client.login(username="operator", password="pw")
    return client


def test_the_playground_shows_ranked_results_with_snippets_and_explain_fields(operator, alice, index_files):
    index_files(alice, {"memory/trip.md": TRIP, "memory/work.md": "The launch moved to June."})
    response = operator.get(f"/admin/agents/agent/{alice.agent.pk}/search/", {"query": "pastel de nata"})
    assert response.status_code == 200
    rows = response.context["rows"]
    assert rows and rows[0]["result"].path == "memory/trip.md"
    assert dict(rows[0]["explain"]).keys() >= {"vector_rank", "vector_score", "keyword_rank", "keyword_score"}
    html = response.content.decode()
    assert "Alice ate pastel de nata every morning." in html
    assert f"memory/trip.md</a>#L{rows[0]['result'].start_line}-{rows[0]['result'].end_line}" in html
    assert "keyword_rank: 1" in html and "mode hybrid" in html


def test_the_playground_searches_only_that_agents_memory(operator, alice, bob, index_files):
    index_files(alice, {"memory/trip.md": TRIP})
    response = operator.get(f"/admin/agents/agent/{bob.agent.pk}/search/", {"query": "Lisbon"})
    assert response.context["rows"] == []
    assert "Lisbon in May" not in response.content.decode()


def test_the_playground_applies_mode_and_filters(operator, alice, index_files):
    index_files(alice, {"memory/trip.md": TRIP, "notes/trip.md": TRIP})
    response = operator.get(
        f"/admin/agents/agent/{alice.agent.pk}/search/", {"query": "Lisbon", "mode": "keyword", "path_prefix": "notes/"}
    )
    assert response.context["response"].mode == "keyword"
    assert {row["result"].path for row in response.context["rows"]} == {"notes/trip.md"}


def test_bad_input_is_shown_as_a_message(operator, alice):
    response = operator.get(f"/admin/agents/agent/{alice.agent.pk}/search/", {"query": "Lisbon", "max_results": 5000})
    assert response.status_code == 200
    assert response.context["response"] is None
    assert 'id="search-error"' in response.content.decode() and "max_results" in response.context["error"]


def test_the_playground_needs_a_staff_login(client, alice):
    response = client.get(f"/admin/agents/agent/{alice.agent.pk}/search/", {"query": "x"})
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
