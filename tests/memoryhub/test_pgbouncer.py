"""The service behind a real PgBouncer (Debian's `pgbouncer`, in front of the embedded server), set up as
docs/configuration.md says: `pool_mode = session`, and MEMORYHUB_DB_FORCE_CUSTOM_PLANS=0.

- The start-up option the service sends by default (`-c plan_cache_mode=force_custom_plan`) is refused by
  PgBouncer: that is why the setting exists. The role setting the docs give instead reaches the server.
- In session mode a file is uploaded, indexed, found and its agent deleted with every statement through
  PgBouncer, and the agent deletion's session advisory lock, held by another client, keeps the deletion out.
- In transaction mode that lock excludes nothing: two clients take turns on one server connection, and
  the second is granted the lock the first holds. That is why the docs ask for session pooling.

Where PgBouncer is not installed the tests are skipped with that reason, unless
MEMORYHUB_REQUIRE_PGBOUNCER_TESTS=1 (.ci/run installs it and sets that), where it is a failure."""

import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, OperationalError, connections

from agents.deletion import ADVISORY_LOCK_CLASS, BUSY, agent_purge
from agents.models import Agent
from agents.services import agent_delete
from memoryhub import embedded_postgres
from memoryhub.postgresql.base import DatabaseWrapper
from memoryhub.postgresql.wait_limit import wait_limit
from tests.reliability.processes import BASE_DIR, free_port, statement_running, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),  # the clients through PgBouncer see committed rows only
    pytest.mark.skipif(
        bool(settings.DATABASE_URL) or not embedded_postgres.is_installed(),
        reason="puts PgBouncer in front of the embedded PostgreSQL",
    ),
]

START_TIMEOUT_SECONDS = 30


def pgbouncer_path() -> str:
    found = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None)
    if found is None:
        reason = "PgBouncer is not installed (apt-get install pgbouncer)"
        if os.environ.get("MEMORYHUB_REQUIRE_PGBOUNCER_TESTS") == "1":
            pytest.fail(f"MEMORYHUB_REQUIRE_PGBOUNCER_TESTS=1 but {reason}")
        pytest.skip(reason)
    return found


@dataclass
class Bouncer:
    port: int
    process: subprocess.Popen
    folder: Path

    def connect(self, dbname: str) -> psycopg.Connection:
        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=dbname, autocommit=True)

    def queries(self, dbname: str) -> int:
        """Statements PgBouncer has passed on to ``dbname`` so far (its admin console's SHOW STATS)."""
        with self.connect("pgbouncer") as admin:
            cursor = admin.execute("SHOW STATS")
            columns = [column.name for column in cursor.description]
            by_database = {row[columns.index("database")]: row for row in cursor.fetchall()}
        return by_database[dbname][columns.index("total_query_count")] if dbname in by_database else 0


def bouncer_start(*, pool_mode: str, pool_size: int = 5) -> Bouncer:
    """PgBouncer on a free TCP port of 127.0.0.1, in front of the embedded server's Unix socket."""
    executable = pgbouncer_path()
    server = connections[DEFAULT_DB_ALIAS]
    server.ensure_connection()  # fills in the embedded server's socket folder and port
    socket_folder = Path(server.settings_dict["HOST"])
    folder = Path(tempfile.mkdtemp(prefix="mh-pgbouncer-"))
    port = free_port()
    lines = [
        "[databases]",
        f"* = host={socket_folder} port={server.settings_dict['PORT']} user={server.settings_dict['USER']}",
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        f"listen_port = {port}",
        "unix_socket_dir =",
        "auth_type = any",
        "admin_users = postgres",
        f"pool_mode = {pool_mode}",
        f"default_pool_size = {pool_size}",
        f"logfile = {folder / 'pgbouncer.log'}",
    ]
    if os.geteuid() == 0:
        # PgBouncer will not run as root: it becomes the user the embedded server runs as, who alone may
        # open the server's socket folder, and who must be able to write its log.
        owner = pwd.getpwuid(socket_folder.stat().st_uid)
        lines.append(f"user = {owner.pw_name}")
        os.chown(folder, owner.pw_uid, owner.pw_gid)
    (folder / "pgbouncer.ini").write_text("\n".join(lines) + "\n")
    process = subprocess.Popen(
        [executable, str(folder / "pgbouncer.ini")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return Bouncer(port=port, process=process, folder=folder)
        except OSError:
            log = folder / "pgbouncer.log"
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"PgBouncer did not start: {log.read_text() if log.exists() else 'no log'}")
            time.sleep(0.05)


def bouncer_stop(bouncer: Bouncer) -> None:
    bouncer.process.terminate()
    try:
        bouncer.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        bouncer.process.kill()
        bouncer.process.wait()
    shutil.rmtree(bouncer.folder, ignore_errors=True)


@pytest.fixture
def session_bouncer():
    bouncer = bouncer_start(pool_mode="session")
    yield bouncer
    bouncer_stop(bouncer)


def wrapper_through(bouncer: Bouncer, *, options: dict) -> DatabaseWrapper:
    """The default connection's settings as DATABASE_URL=postgres://postgres@127.0.0.1:<PgBouncer> gives
    them, with ``options`` for the connection's OPTIONS."""
    primary = connections[DEFAULT_DB_ALIAS].settings_dict
    return DatabaseWrapper(
        {**primary, "ENGINE": "memoryhub.postgresql", "HOST": "127.0.0.1", "PORT": str(bouncer.port),
         "USER": "postgres", "OPTIONS": options},
        alias=DEFAULT_DB_ALIAS,
    )


@pytest.fixture
def through_bouncer(session_bouncer):
    """The service's database connection goes through PgBouncer for the test, with its start-up options
    left out (MEMORYHUB_DB_FORCE_CUSTOM_PLANS=0); put back before the test database is flushed."""
    original = connections[DEFAULT_DB_ALIAS]
    options = {key: value for key, value in original.settings_dict["OPTIONS"].items() if key != "options"}
    connections[DEFAULT_DB_ALIAS] = wrapper_through(session_bouncer, options=options)
    try:
        yield session_bouncer
    finally:
        connections[DEFAULT_DB_ALIAS].close()
        connections[DEFAULT_DB_ALIAS] = original


def test_the_default_start_up_option_is_refused_by_pgbouncer_with_the_setting_named(session_bouncer):
    options = connections[DEFAULT_DB_ALIAS].settings_dict["OPTIONS"]
    assert "plan_cache_mode=force_custom_plan" in options.get("options", ""), "the tests run with the default setting"
    refused = wrapper_through(session_bouncer, options=options)
    with pytest.raises(OperationalError, match="unsupported startup parameter: options") as raised:
        refused.ensure_connection()
    assert "MEMORYHUB_DB_FORCE_CUSTOM_PLANS=0" in str(raised.value)
    refused.close()


def test_manage_py_behind_pgbouncer_says_which_setting_to_change(session_bouncer):
    """As `make run` or docker compose meet it: their first step, migrate, with DATABASE_URL at PgBouncer."""
    name = connections[DEFAULT_DB_ALIAS].settings_dict["NAME"]
    url = f"postgresql://postgres@127.0.0.1:{session_bouncer.port}/{name}"
    environment = {**os.environ, "DATABASE_URL": url, "MEMORYHUB_EMBEDDING_PROVIDER": "none"}
    environment.pop("MEMORYHUB_DB_FORCE_CUSTOM_PLANS", None)
    command = [sys.executable, "manage.py", "migrate", "--check"]
    refused = subprocess.run(command, cwd=BASE_DIR, env=environment, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0
    assert "unsupported startup parameter: options" in refused.stderr
    assert "MEMORYHUB_DB_FORCE_CUSTOM_PLANS=0" in refused.stderr

    accepted = subprocess.run(
        command, cwd=BASE_DIR, env={**environment, "MEMORYHUB_DB_FORCE_CUSTOM_PLANS": "0"},
        capture_output=True, text=True, timeout=120,
    )
    assert accepted.returncode == 0, accepted.stderr  # the test database is migrated: nothing to apply


def test_the_role_setting_the_docs_give_instead_reaches_the_server(session_bouncer):
    name = connections[DEFAULT_DB_ALIAS].settings_dict["NAME"]
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute(f'ALTER ROLE postgres IN DATABASE "{name}" SET plan_cache_mode = force_custom_plan')
    try:
        with session_bouncer.connect(name) as client:
            assert client.execute("SHOW plan_cache_mode").fetchone()[0] == "force_custom_plan"
    finally:
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
            cursor.execute(f'ALTER ROLE postgres IN DATABASE "{name}" RESET plan_cache_mode')


def test_a_statement_cut_by_the_limit_ends_in_the_server_through_session_pooling(through_bouncer, settings):
    """PgBouncer closes its server connection when its client goes in the middle of a statement, and the client
    check the service sets when a connection opens (MEMORYHUB_DB_CLIENT_CHECK_SECONDS, through PgBouncer) then
    ends the statement; without the check it ran on (still running 12 s later, measured by hand)."""
    settings.MEMORYHUB_DB_CLIENT_CHECK_SECONDS = 1
    bounced = connections[DEFAULT_DB_ALIAS]
    name = bounced.settings_dict["NAME"]
    marker = "cut-through-pgbouncer-test"
    with pytest.raises(OperationalError), wait_limit(0.5), bounced.cursor() as cursor:
        cursor.execute(f"SELECT pg_sleep(20) /* {marker} */")
    params = {"host": "127.0.0.1", "port": through_bouncer.port, "user": "postgres", "dbname": name}
    wait_for(lambda: not statement_running(marker, params), timeout=4, what="the statement to end")


def test_a_file_is_indexed_found_and_deleted_through_session_pooling(
    alice, through_bouncer, eager_tasks, fake_embeddings, django_capture_on_commit_callbacks
):
    name = connections[DEFAULT_DB_ALIAS].settings_dict["NAME"]
    before = through_bouncer.queries(name)
    with django_capture_on_commit_callbacks(execute=True):
        uploaded = alice.client.put(
            "/api/v1/files/notes/heron.md", "The heron project ships in May.\n", content_type="text/plain"
        )
    assert uploaded.status_code in (200, 201), uploaded.content
    status = alice.client.get("/api/v1/status").json()
    assert status["pending"] == 0 and status["files"] == 1, status

    found = alice.client.post("/api/v1/search", {"query": "when does the heron project ship"}, format="json")
    assert found.status_code == 200, found.content
    assert [result["path"] for result in found.json()["results"]] == ["notes/heron.md"]
    assert found.json()["mode"] == "hybrid"

    # The deletion runs under a session advisory lock: held by another client of the same PgBouncer, it
    # keeps the deletion task out, as it does on a direct connection.
    with through_bouncer.connect(name) as other:
        assert other.execute("SELECT pg_try_advisory_lock(%s, %s)", [ADVISORY_LOCK_CLASS, alice.agent.pk]).fetchone()[0]
        assert agent_delete(agent=alice.agent, actor=None)  # its task runs here (eager), and finds the lock
        assert Agent.objects.filter(pk=alice.agent.pk).exists()
        assert agent_purge(agent_id=alice.agent.pk).skipped == BUSY
    outcome = agent_purge(agent_id=alice.agent.pk)  # the other client is gone, and its lock with it
    assert outcome.finished, outcome
    assert not Agent.objects.filter(pk=alice.agent.pk).exists()
    assert through_bouncer.queries(name) > before, "the statements did not go through PgBouncer"


@pytest.mark.parametrize("pool_mode, second_granted", [("session", False), ("transaction", True)])
def test_a_session_advisory_lock_excludes_only_under_session_pooling(db, pool_mode, second_granted):
    name = connections[DEFAULT_DB_ALIAS].settings_dict["NAME"]
    # One server connection in transaction mode, so that both clients are sure to share it; two in session
    # mode, where each client keeps one for as long as it is connected.
    bouncer = bouncer_start(pool_mode=pool_mode, pool_size=1 if pool_mode == "transaction" else 2)
    try:
        with bouncer.connect(name) as first, bouncer.connect(name) as second:
            lock = "SELECT pg_try_advisory_lock(%s, %s)"
            assert first.execute(lock, [ADVISORY_LOCK_CLASS, 1]).fetchone()[0]
            assert second.execute(lock, [ADVISORY_LOCK_CLASS, 1]).fetchone()[0] is second_granted
    finally:
        bouncer_stop(bouncer)
