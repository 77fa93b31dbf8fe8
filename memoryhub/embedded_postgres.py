"""The embedded PostgreSQL used when DATABASE_URL is not set.

``pgserver`` ships PostgreSQL 16.2 with pgvector 0.6.2 as a Python wheel and runs it from a data
directory without root, listening on a Unix socket only (no TCP port to collide with). The data
directory lives in the project folder (``.pgdata/``, git-ignored) and is reused across runs.

The server is started on demand by whichever process needs it first (its first database connection
through memoryhub/embedded_db, ``make run``, the test session) and keeps running until ``stop`` is called: ``make run`` stops it on Ctrl-C, and
``python -m memoryhub.embedded_postgres stop`` stops it by hand.

A streaming replica of the embedded server (to try DATABASE_REPLICA_URLS on one machine; the read-replica
test starts one): ``replica_start`` copies the running server with ``pg_basebackup`` into its own folder
and starts it as a hot standby on a socket in that folder; ``stop`` stops it like any data folder.

Command line: ``python -m memoryhub.embedded_postgres start|stop|status [--data-dir DIR]``, and
``python -m memoryhub.embedded_postgres replica --replica-dir DIR`` (prints the replica's URL).
"""

import argparse
import logging
import sys
import warnings
from pathlib import Path

import psycopg

DATABASE_NAME = "memoryhub"
# Folders whose server this process started (so a test session can stop what it started, and only that).
started_here: set[Path] = set()
DEFAULT_DATA_DIR = Path(__file__).resolve().parent.parent / ".pgdata"
# How long a clean stop may take (the shutdown checkpoint is slow on a busy machine).
STOP_TIMEOUT_SECONDS = 180
# How long the check that the service's database exists may wait to connect, unless the caller gives its own
# (the service's connections give MEMORYHUB_DB_CONNECT_TIMEOUT): a server that runs and hangs (its processes
# stopped) accepts the connection and never answers (psycopg's default wait is 130 s).
CONNECT_TIMEOUT_SECONDS = 10

# platformdirs warns on every start when XDG_RUNTIME_DIR is unset; pgserver copes without it.
warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
logging.getLogger("pgserver").setLevel(logging.WARNING)


def _postmaster(data_dir: Path):
    from pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(data_dir)
    return info if info is not None and info.is_running() and info.status == "ready" else None


def is_installed() -> bool:
    """Whether ``pgserver`` (the ``embedded`` extra) is installed; the Docker image leaves it out."""
    try:
        import pgserver  # noqa: F401
    except ImportError:
        return False
    return True


def is_running(data_dir: Path = DEFAULT_DATA_DIR) -> bool:
    return _postmaster(Path(data_dir)) is not None


def ensure_running(data_dir: Path = DEFAULT_DATA_DIR, *, connect_timeout: int | None = None) -> dict:
    """Start the server if needed (initdb on an empty folder) and return connection parameters
    for the ``memoryhub`` database, creating that database on first use."""
    params, _ = _started(data_dir)
    _ensure_database(params, connect_timeout)
    return params


def connection_params(data_dir: Path = DEFAULT_DATA_DIR, *, connect_timeout: int | None = None) -> dict:
    """The connection parameters of the server in ``data_dir``, as ``ensure_running`` gives them, but without a
    connection to a server that was running already: the service's database was created by whoever started it
    (``ensure_running``: make run, the command line, the test session; or this function, which creates it when
    it starts the server). A process's first connection (memoryhub/embedded_db) asks this: a server that runs and
    hangs then costs that connection its own connect timeout, which the backend counts as a try that found the
    database down (memoryhub/postgresql/reachable.py), where a check of its own here cost every request of a
    process that had not connected yet another wait."""
    params, started = _started(data_dir)
    if started:
        _ensure_database(params, connect_timeout)
    return params


def _started(data_dir: Path) -> tuple[dict, bool]:
    """The server's connection parameters, the server started first if it was not running; and whether this
    call started it."""
    data_dir = Path(data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    info = _postmaster(data_dir)
    started = info is None
    if started:
        from pgserver import PostgresServer

        # pgserver caches one handle per folder and would hand back a stale one after stop().
        PostgresServer._instances.pop(data_dir, None)
        # cleanup_mode=None: this process does not own the server's lifetime; stop() does.
        PostgresServer(data_dir, cleanup_mode=None)
        started_here.add(data_dir)
        info = _postmaster(data_dir)
        if info is None:
            raise RuntimeError(f"embedded PostgreSQL in {data_dir} did not start; see {data_dir / 'log'}")
    return {"host": str(info.socket_dir), "port": info.port, "user": "postgres", "dbname": DATABASE_NAME}, started


def _ensure_database(params: dict, connect_timeout: int | None) -> None:
    connect_timeout = connect_timeout or CONNECT_TIMEOUT_SECONDS
    with psycopg.connect(**{**params, "dbname": "postgres"}, autocommit=True, connect_timeout=connect_timeout) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [params["dbname"]]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{params["dbname"]}"')


def _server_user() -> str | None:
    """pgserver runs postgres as this user when started by root (postgres refuses to run as root)."""
    import os

    return "pgserver" if os.geteuid() == 0 else None


def replica_start(*, replica_dir: Path, primary_dir: Path = DEFAULT_DATA_DIR) -> dict:
    """Start a streaming replica of the embedded server in ``primary_dir`` (started if needed) from
    ``replica_dir``: an empty folder is filled by ``pg_basebackup -R`` (a base backup that starts as a
    standby of the primary), a filled one is started again. Returns its connection parameters."""
    import shutil

    from pgserver._commands import pg_basebackup, pg_ctl

    primary = ensure_running(primary_dir)
    replica_dir = Path(replica_dir).resolve()
    user = _server_user()
    if not (replica_dir / "PG_VERSION").exists():
        replica_dir.mkdir(parents=True, exist_ok=True)
        replica_dir.chmod(0o700)  # postgres refuses a data folder others can read
        if user is not None:
            shutil.chown(replica_dir, user=user)
        pg_basebackup(
            ["-h", primary["host"], "-p", str(primary["port"]), "-U", primary["user"], "-D", str(replica_dir),
             "-R", "-X", "stream", "-c", "fast"],
            user=user,
        )
        # The primary keeps its socket, pgserver's bookkeeping and its log in its data folder, and the
        # base backup copies them: a copied socket lock would stop the replica from starting.
        for leftover in [*replica_dir.glob(".s.PGSQL.*"), replica_dir / ".handle_pids.json", replica_dir / "log"]:
            leftover.unlink(missing_ok=True)
    if _postmaster(replica_dir) is None:
        # Its own socket folder, no TCP (as the primary): the same port number cannot collide.
        pg_ctl(["-w", "-t", str(STOP_TIMEOUT_SECONDS), "-o", '-h ""', "-o", f"-k {replica_dir}", "-l", str(replica_dir / "log"), "start"],
               pgdata=replica_dir, user=user)
        started_here.add(replica_dir)
    info = _postmaster(replica_dir)
    if info is None:
        raise RuntimeError(f"embedded PostgreSQL replica in {replica_dir} did not start; see {replica_dir / 'log'}")
    return {"host": str(info.socket_dir), "port": info.port, "user": "postgres", "dbname": DATABASE_NAME}


def stop(data_dir: Path = DEFAULT_DATA_DIR) -> bool:
    """Stop the server cleanly (``pg_ctl stop -m fast``). Returns False when it was not running."""
    data_dir = Path(data_dir).resolve()
    if _postmaster(data_dir) is None:
        return False
    from pgserver._commands import pg_ctl

    import subprocess
    import time

    user = _server_user()
    try:
        # pg_ctl gives up after -t seconds (default 60) while the shutdown checkpoint may still be
        # writing on a loaded machine; a slow stop is not a failed one, so wait for the postmaster.
        pg_ctl(["-w", "-t", str(STOP_TIMEOUT_SECONDS), "-m", "fast", "stop"], pgdata=data_dir, user=user)
    except subprocess.CalledProcessError:
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        while postmaster_alive(data_dir) and time.monotonic() < deadline:
            time.sleep(0.5)
        if postmaster_alive(data_dir):
            raise RuntimeError(f"embedded PostgreSQL in {data_dir} did not stop; see {data_dir / 'log'}") from None
    return True


def postmaster_alive(data_dir: Path) -> bool:
    """Whether the server's main process runs, ready or not (starting, stopping, hung)."""
    from pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(data_dir)
    return info is not None and info.is_running()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memoryhub.embedded_postgres", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["start", "stop", "status", "replica"])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--replica-dir", type=Path, help="replica: the replica's data folder (created by the first run)")
    args = parser.parse_args(argv)
    if args.action == "replica":
        if args.replica_dir is None:
            parser.error("replica needs --replica-dir")
        params = replica_start(replica_dir=args.replica_dir, primary_dir=args.data_dir)
        print(f"replica of {args.data_dir} running in {args.replica_dir}: "
              f"DATABASE_REPLICA_URLS=postgresql://postgres@/{params['dbname']}?host={params['host']}&port={params['port']}")
        print(f"stop it with: python -m memoryhub.embedded_postgres stop --data-dir {args.replica_dir}")
    elif args.action == "start":
        params = ensure_running(args.data_dir)
        print(f"embedded PostgreSQL running in {args.data_dir} (socket {params['host']})")
    elif args.action == "stop":
        print("embedded PostgreSQL stopped" if stop(args.data_dir) else "embedded PostgreSQL was not running")
    else:
        running = is_running(args.data_dir)
        print(f"embedded PostgreSQL in {args.data_dir}: {'running' if running else 'stopped'}")
        return 0 if running else 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
