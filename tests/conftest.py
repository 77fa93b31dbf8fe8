"""The cast every test shares: two agents of one operator (alice, bob) and an outsider (mallory).

Isolation tests use all three: whatever alice can see, bob and mallory must not, and the reverse.
"""

import os
import threading
from dataclasses import dataclass

import psycopg
import pytest
from django.db import connection
from rest_framework.test import APIClient

from agents.models import Agent, AgentToken, Team, TeamMembership
from agents.services import agent_create, agent_token_create, team_create
from indexing.embeddings import FakeProvider
from memoryhub.celery import app as celery_app
from search.services import query_cache_clear


@dataclass
class Member:
    agent: Agent
    token: AgentToken
    raw_token: str
    client: APIClient


def _member(slug: str, scopes=None, team=None) -> Member:
    agent = agent_create(slug=slug, team=team)
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
def eager_tasks():
    """Tasks run in the test process. Celery reads its configuration once, so the switch is set on the
    app itself; not propagating lets eager retries run as they would on a worker (tests assert the job's
    state). The indexing, search and client tests use it for every test (their conftest)."""
    old = celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates
    celery_app.conf.task_always_eager = True
    celery_app.conf.task_eager_propagates = False
    yield
    celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates = old


@pytest.fixture
def fake_embeddings(settings):
    """The deterministic, call-counting embedding provider, with fresh counts and no cached query vectors."""
    settings.MEMORYHUB_EMBEDDING_PROVIDER = "fake"
    settings.MEMORYHUB_EMBEDDING_MODEL = "fake-hash"
    settings.MEMORYHUB_EMBEDDING_DIMENSIONS = 64
    FakeProvider.reset_counts()
    query_cache_clear()
    yield FakeProvider
    FakeProvider.reset_counts()
    query_cache_clear()


@dataclass
class TeamCast:
    """Two teams, each with agents and operators: red (agents red-handbook, red-writer; users red-admin,
    red-viewer) and blue (agent blue-agent; users blue-admin, blue-viewer). Users' password is "pw"."""

    red: Team
    blue: Team
    red_handbook: Member
    red_writer: Member
    blue_agent: Member
    users: dict


def team_cast_build() -> TeamCast:
    from django.contrib.auth.models import User

    red, blue = team_create(slug="red"), team_create(slug="blue")
    users = {}
    for team in (red, blue):
        for role in (TeamMembership.Role.ADMIN, TeamMembership.Role.VIEWER):
            user = User.objects.create_user(f"{team.slug}-{role}", password="pw", is_staff=True)
            TeamMembership.objects.create(team=team, user=user, role=role)
            users[user.username] = user
    return TeamCast(
        red=red, blue=blue, users=users,
        red_handbook=_member("red-handbook", team=red),
        red_writer=_member("red-writer", team=red),
        blue_agent=_member("blue-agent", team=blue),
    )


@pytest.fixture
def team_cast(db) -> TeamCast:
    return team_cast_build()


@pytest.fixture
def own_rate_limits(monkeypatch):
    """The rate limiter's state of this test alone: its own Redis keys and in-process fallback store, and
    no penalty, request in progress or lowered cap left by another test in this process's throttles."""
    import uuid

    from agents import throttles
    from memoryhub import ratelimit

    monkeypatch.setattr(ratelimit, "KEY_PREFIX", f"memoryhub:test-rl:{uuid.uuid4().hex}")
    monkeypatch.setattr(ratelimit, "store", ratelimit._Store())
    monkeypatch.setattr(throttles, "_penalties", {})
    monkeypatch.setattr(throttles, "_in_progress", {})
    monkeypatch.setattr(throttles, "_limited", {})


@pytest.fixture(autouse=True)
def _own_query_breaker(monkeypatch):
    """The query embedding's circuit breaker of this test alone (search/query_breaker.py): its own Redis keys
    and in-process state. Its state is shared through Redis by every process, for the fake provider's
    identity too: a test whose provider fails three times opened it for the tests after it, in this run and
    (for the cool-down) in the next, and they answered by keywords alone."""
    import uuid

    from search import query_breaker

    monkeypatch.setattr(query_breaker, "KEY_PREFIX", f"memoryhub:test-breaker:{uuid.uuid4().hex}")
    monkeypatch.setattr(query_breaker.QueryBreaker, "_local", query_breaker._LocalStore())


@pytest.fixture
def lock_table():
    """lock_table(name): another connection takes an ACCESS EXCLUSIVE lock on the table, so any query
    reading it waits (a stalled database, as far as that table goes); released after 30 s at most (then
    a search without its bounds would go on), or at the end of the test."""
    holders = []

    def lock(table: str) -> None:
        params = connection.get_connection_params()
        holder = psycopg.connect(**{k: params[k] for k in ("dbname", "user", "password", "host", "port") if params.get(k)})
        holder.execute("SET lock_timeout = '5s'")
        holder.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        timer = threading.Timer(30, holder.rollback)
        timer.start()
        holders.append((holder, timer))

    yield lock
    for holder, timer in holders:
        timer.cancel()
        holder.rollback()
        holder.close()


@pytest.fixture
def anonymous_client() -> APIClient:
    return APIClient()


@pytest.fixture(autouse=True)
def _usage_rows_written(django_db_blocker):
    """The usage rows a test's searches buffered (memoryhub/usage/services.py: in autocommit) written, and
    their flusher thread ended, before the next test: no test sees another's thread or rows."""
    from memoryhub.usage.services import search_records_close

    yield
    with django_db_blocker.unblock():
        search_records_close()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """pytest-django's test database, and before it is dropped the search helpers' connections closed
    (search/beside.py: each helper thread keeps one to the test database), and the usage rows' flusher's
    (memoryhub/usage/services.py)."""
    from memoryhub.usage.services import search_records_close
    from search.beside import helpers_close

    yield
    helpers_close()
    search_records_close()


# The servers and workers tests start inherit this process's environment, so no test (and no module
# imported while collecting) may leave a MEMORYHUB_ setting in it: importing memoryhub/gunicorn_conf.py
# once set the database pool size there, and later tests' servers ran with a pool they did not expect.
_ENVIRONMENT_AT_START: dict[str, str] = {}
_ENVIRONMENT_BEFORE = pytest.StashKey[dict]()


def _memoryhub_environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key.startswith("MEMORYHUB_")}


def _environment_changes(before: dict[str, str]) -> list[str]:
    after = _memoryhub_environment()
    return sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))


def pytest_configure(config):
    # No test measures its model's window (indexing/window_probe.py) unless it asks, in this process (the
    # fixture below) or in the servers and workers it starts: a probe's requests would count in the tests
    # that count a provider's requests. tests/indexing/test_window_probe.py turns it on.
    os.environ.setdefault("MEMORYHUB_EMBEDDING_WINDOW_PROBE", "0")
    _ENVIRONMENT_AT_START.update(_memoryhub_environment())


@pytest.fixture(autouse=True)
def _model_check_read_afresh():
    """Each test's first search reads the model check's answer (indexing/model_check.py caches it for a minute
    per process): whether a search sends that query must not depend on which test ran in the minute before."""
    from indexing.model_check import model_check_cache_clear

    model_check_cache_clear()


@pytest.fixture(autouse=True)
def _no_window_probe(settings):
    settings.MEMORYHUB_EMBEDDING_WINDOW_PROBE = False


def pytest_collection_finish(session):
    changed = _environment_changes(_ENVIRONMENT_AT_START)
    if changed:
        raise pytest.UsageError(f"importing the test modules changed os.environ: {', '.join(changed)}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    # After every fixture's teardown (monkeypatch's restores included): what is left changed is the test's.
    before = item.stash.get(_ENVIRONMENT_BEFORE, None)
    result = yield
    changed = _environment_changes(before) if before is not None else []
    if changed:
        for key in changed:
            os.environ.pop(key, None)
        os.environ.update({key: before[key] for key in changed if key in before})
        raise AssertionError(f"the test left os.environ changed (restored): {', '.join(changed)}")
    return result


def pytest_runtest_setup(item):
    item.stash[_ENVIRONMENT_BEFORE] = _memoryhub_environment()


def pytest_sessionfinish(session, exitstatus):
    """Leave the machine as we found it: stop the embedded PostgreSQL if this test run started it."""
    from memoryhub import embedded_postgres

    for data_dir in list(embedded_postgres.started_here):
        embedded_postgres.stop(data_dir)
