"""The cast every test shares: two agents of one operator (alice, bob) and an outsider (mallory).

Isolation tests use all three: whatever alice can see, bob and mallory must not, and the reverse.
"""

from dataclasses import dataclass

import pytest
from rest_framework.test import APIClient

from agents.models import Agent, AgentToken
from agents.services import agent_create, agent_token_create


@dataclass
class Member:
    agent: Agent
    token: AgentToken
    raw_token: str
    client: APIClient


def _member(slug: str, scopes=None) -> Member:
    agent = agent_create(slug=slug)
    token, raw = agent_token_create(agent=agent, scopes=scopes, label=f"{slug} test token")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return Member(agent=agent, token=token, raw_token=raw, client=client)


@pytest.fixture
def alice(db) -> Member:
    return _member("alice")


@pytest.fixture
def bob(db) -> Member:
    return _member("bob")


@pytest.fixture
def mallory(db) -> Member:
    return _member("mallory")


@pytest.fixture
def cast(alice, bob, mallory):
    return {"alice": alice, "bob": bob, "mallory": mallory}


@pytest.fixture
def make_member(db):
    """Build another agent with a token of the given scopes: make_member("reader", scopes=["read"])."""
    return _member


@pytest.fixture
def anonymous_client() -> APIClient:
    return APIClient()


def pytest_sessionfinish(session, exitstatus):
    """Leave the machine as we found it: stop the embedded PostgreSQL if this test run started it."""
    from memoryhub import embedded_postgres

    for data_dir in list(embedded_postgres.started_here):
        embedded_postgres.stop(data_dir)
