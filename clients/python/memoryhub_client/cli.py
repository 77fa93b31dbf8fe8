"""``memoryhub-client`` / ``python -m memoryhub_client``: push, watch, pull and search an agent's memory.

Exit codes: 0 done; 1 the server refused or could not be reached (its message is printed, never a
traceback); 2 usage or configuration error (bad flag, no token, no such directory); 130 interrupted.
The server and token come from --url/--token or MEMORYHUB_URL/MEMORYHUB_TOKEN, set on the agent's host
(they are client settings, not server settings, which is why .env.example does not list them).

Start-up matters (an agent may call ``search`` once per turn): this module imports only argparse at
the top; each command imports what it needs (the HTTP layer, pathspec, watchdog) when it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from memoryhub_client import __version__
from memoryhub_client.errors import ConfigError, ServerError
from memoryhub_client.limits import (
    DEFAULT_BATCH_BYTES, DEFAULT_BATCH_FILES, DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_SYNC_FILES, PROGRESS_MINIMUM_FILES,
)

PROG = "memoryhub-client"
DEFAULT_URL = "http://127.0.0.1:8000"  # where `make run` serves
SEARCH_MODES = ("hybrid", "vector", "keyword")
SOURCES = ("memory", "session", "workspace")


def _positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {raw!r}")
    return value


def _seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {raw!r}") from None
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"must be between 0 and 3600 seconds: {raw!r}")
    return value


def _json_object(raw: str) -> dict:
    import json

    try:
        value = json.loads(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not JSON: {raw!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object: {raw!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    connection = argparse.ArgumentParser(add_help=False)
    group = connection.add_argument_group("server")
    group.add_argument("--url", help=f"MemoryHub server (default: $MEMORYHUB_URL, else {DEFAULT_URL})")
    group.add_argument("--token", help="the agent's mh_ token (default: $MEMORYHUB_TOKEN)")
    group.add_argument("--timeout", type=_seconds, default=120.0, help="seconds to wait for one request (default 120)")
    group.add_argument("--debug", action="store_true", help="show a traceback for unexpected errors")

    syncing = argparse.ArgumentParser(add_help=False)
    group = syncing.add_argument_group("sync")
    group.add_argument("dir", type=Path, help="the agent workspace (MEMORY.md, memory/, transcripts, notes)")
    group.add_argument("--prefix", default="", help="server folder to push into; only files under it are deleted")
    group.add_argument("--keep-deleted", action="store_true", help="do not delete server files that are gone locally")
    group.add_argument(
        "--exclude", action="append", default=[], metavar="PATTERN",
        help="leave out files or folders matching PATTERN, in .gitignore syntax (repeatable; also read from "
        "DIR/.memoryhubignore and the workspace's .gitignore files): '*.log', 'drafts/', '/scratch', '!keep.md'",
    )
    group.add_argument("--no-gitignore", dest="gitignore", action="store_false",
                       help="do not read the workspace's .gitignore files (.memoryhubignore and --exclude still apply)")
    group.add_argument("--webhook-secret", help="the agent's webhook secret, if it has one (default: $MEMORYHUB_WEBHOOK_SECRET)")
    group.add_argument("--max-file-bytes", type=_positive_int, default=DEFAULT_MAX_FILE_BYTES,
                       help="skip larger files (default: the server's default limit, 5 MB)")
    group.add_argument("--batch-files", type=_positive_int, default=DEFAULT_BATCH_FILES, help="files per upload request")
    group.add_argument("--batch-bytes", type=_positive_int, default=DEFAULT_BATCH_BYTES, help="JSON bytes per upload request")
    group.add_argument("--max-sync-files", type=_positive_int, default=DEFAULT_MAX_SYNC_FILES,
                       help="entries per sync request, as the server's MEMORYHUB_MAX_SYNC_FILES (default 10000)")
    bar = group.add_mutually_exclusive_group()
    bar.add_argument("--progress", action="store_true", default=None, help="always draw the progress bar")
    bar.add_argument("--no-progress", dest="progress", action="store_false", help="never draw it")
    group.add_argument("-v", "--verbose", action="store_true", help="list skipped and deleted files")

    parser = argparse.ArgumentParser(prog=PROG, description="Push, watch, pull and search an agent's memory on a MemoryHub server.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="{push,watch,pull,search}")

    push = commands.add_parser("push", parents=[syncing, connection], help="upload what changed in a workspace, once")
    push.add_argument("--json", action="store_true", help="print the outcome as JSON")
    push.add_argument("--wait", action="store_true", help="then wait until the server has indexed everything")
    push.add_argument("--wait-timeout", type=_seconds, default=600.0, help="seconds --wait waits (default 600)")

    watch = commands.add_parser("watch", parents=[syncing, connection], help="push now and on every change, until Ctrl-C")
    watch.add_argument("--debounce", type=_seconds, default=1.5, help="quiet seconds before a push (default 1.5)")

    pull = commands.add_parser("pull", parents=[connection], help="write the agent's files from the server into a folder")
    pull.add_argument("dir", type=Path, help="where to write them (created if missing)")
    pull.add_argument("--prefix", default="", help="only the server folder PREFIX, written relative to it (as push --prefix)")
    pull.add_argument("--force", action="store_true", help="overwrite local files whose content differs from the server's")
    pull.add_argument("--json", action="store_true", help="print the outcome as JSON")
    pull.add_argument("-v", "--verbose", action="store_true", help="list written and kept files")

    search = commands.add_parser("search", parents=[connection], help="search the agent's memory")
    search.add_argument("query")
    search.add_argument("-n", "--max-results", type=_positive_int, help="at most this many results (server default 6)")
    search.add_argument("--min-score", type=float, help="drop results below this score")
    search.add_argument("--mode", choices=SEARCH_MODES)
    search.add_argument("--source", dest="sources", action="append", choices=SOURCES, help="only this source (repeatable)")
    search.add_argument("--path-prefix", help="only files under this path")
    search.add_argument("--since", dest="modified_since", help="only files modified since (ISO 8601 or Unix seconds)")
    search.add_argument("--until", dest="modified_until", help="only files modified until (ISO 8601 or Unix seconds)")
    search.add_argument("--filters", type=_json_object, help="a filter on the files' attributes, as JSON: "
                        '\'{"type": "eq", "key": "project", "value": "falcon"}\' (docs/api.md, "Attributes")')
    search.add_argument("--json", action="store_true", help="print the server's JSON answer")
    return parser


def _client(args, *, with_secret: bool = False):
    from memoryhub_client.api import ApiClient

    url = args.url or os.environ.get("MEMORYHUB_URL") or DEFAULT_URL
    token = args.token or os.environ.get("MEMORYHUB_TOKEN") or ""
    secret = (getattr(args, "webhook_secret", None) or os.environ.get("MEMORYHUB_WEBHOOK_SECRET") or "") if with_secret else ""
    return ApiClient(
        url=url, token=token.strip(), webhook_secret=secret, timeout=args.timeout,
        on_retry=lambda message: print(f"{PROG}: {message}", file=sys.stderr, flush=True),
    )


def _workspace(args) -> Path:
    root = args.dir.expanduser()
    if not root.is_dir():
        raise ConfigError(f"not a directory: {args.dir}")
    return root.resolve()


def _push_options(args):
    from memoryhub_client.push import PushOptions

    return PushOptions(
        prefix=args.prefix, delete_missing=not args.keep_deleted, max_file_bytes=args.max_file_bytes,
        batch_files=args.batch_files, batch_bytes=args.batch_bytes, max_sync_files=args.max_sync_files,
        exclude=tuple(args.exclude), gitignore=args.gitignore,
    )


def _progress(args):
    from memoryhub_client.progress import Progress

    if args.progress is None:
        return Progress(enabled=sys.stderr.isatty(), minimum_total=PROGRESS_MINIMUM_FILES)
    return Progress(enabled=args.progress)


def _report_details(result, *, verbose: bool) -> None:
    if result.kept_server_files:
        print(f"{PROG}: no files to push here, so nothing was deleted on the server", file=sys.stderr)
    if verbose:
        for path, reason in result.skipped:
            print(f"skipped  {path}  ({reason})", file=sys.stderr)
        for path in result.deleted:
            print(f"deleted  {path}", file=sys.stderr)


def _wait_until_indexed(client, *, timeout: float) -> int:
    import time

    deadline = time.monotonic() + timeout
    while True:
        status = client.status()
        if not status.get("pending"):
            failed = status.get("failed") or 0
            print(f"indexed: {status.get('files')} files, {status.get('chunks')} chunks"
                  + (f", {failed} failed (see the server's jobs)" if failed else ""), file=sys.stderr)
            return 0
        if time.monotonic() >= deadline:
            print(f"{PROG}: still {status['pending']} files pending after {timeout:g} s", file=sys.stderr)
            return 1
        time.sleep(0.5)


def command_push(args) -> int:
    import json

    from memoryhub_client.push import workspace_push

    root = _workspace(args)
    client = _client(args, with_secret=True)
    result = workspace_push(client=client, root=root, options=_push_options(args), progress=_progress(args))
    _report_details(result, verbose=args.verbose)
    print(json.dumps(result.as_dict(), ensure_ascii=False) if args.json else result.summary())
    sys.stdout.flush()
    return _wait_until_indexed(client, timeout=args.wait_timeout) if args.wait else 0


def command_watch(args) -> int:
    try:
        import watchdog  # noqa: F401
    except ImportError:
        raise ConfigError("watch needs the watchdog package: pip install 'memoryhub-client[watch]'") from None
    import time

    from memoryhub_client.push import workspace_push
    from memoryhub_client.watch import workspace_watch

    root = _workspace(args)
    client = _client(args, with_secret=True)
    options = _push_options(args)
    pushes = 0

    def push() -> None:
        nonlocal pushes
        pushes += 1
        stamp = time.strftime("%H:%M:%S")
        try:
            result = workspace_push(client=client, root=root, options=options, progress=_progress(args))
        except ServerError as exc:
            if pushes == 1:
                raise  # a wrong token or URL: say so and stop rather than watch in vain
            print(f"[{stamp}] {PROG}: {exc} (will retry on the next change)", file=sys.stderr, flush=True)
            return
        _report_details(result, verbose=args.verbose)
        print(f"[{stamp}] {result.summary()}", flush=True)

    def ready() -> None:
        print(f"watching {root} (debounce {args.debounce:g} s); Ctrl-C to stop", file=sys.stderr, flush=True)

    try:
        workspace_watch(root=root, push=push, debounce=args.debounce, on_ready=ready, exclude=tuple(args.exclude),
                        gitignore=args.gitignore)
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    return 0


def _print_results(response: dict) -> None:
    results = response.get("results") or []
    for result in results:
        print(f"{result['path']}#L{result['start_line']}-L{result['end_line']}  {float(result['score']):.3f}")
        for line in str(result.get("snippet", "")).splitlines() or [""]:
            print(f"    {line}" if line.strip() else "")
        print()
    if not results:
        print(response.get("message") or "No results.")
    footer = f"{len(results)} result{'s' if len(results) != 1 else ''}"
    details = [str(response[key]) for key in ("mode",) if response.get(key)]
    if response.get("took_ms") is not None:
        details.append(f"{float(response['took_ms']):.0f} ms")
    print(footer + (f" ({', '.join(details)})" if details else ""), file=sys.stderr)
    if response.get("pending"):
        print("note: recent changes are still being indexed; results may be incomplete", file=sys.stderr)


def command_pull(args) -> int:
    import json

    from memoryhub_client.pull import workspace_pull

    root = args.dir.expanduser()
    if root.exists() and not root.is_dir():
        raise ConfigError(f"not a directory: {args.dir}")
    client = _client(args)
    root.mkdir(parents=True, exist_ok=True)
    result = workspace_pull(client=client, root=root, prefix=args.prefix, force=args.force)
    if args.verbose:
        for path in result.written:
            print(f"written  {path}", file=sys.stderr)
        for path in result.kept:
            print(f"kept     {path}  (differs locally)", file=sys.stderr)
    for path in result.refused:
        print(f"{PROG}: refused {path!r}: it would be written outside {root}", file=sys.stderr)
    print(json.dumps(result.as_dict(), ensure_ascii=False) if args.json else result.summary())
    return 0


def command_search(args) -> int:
    import json

    client = _client(args)
    response = client.search(
        args.query, max_results=args.max_results, min_score=args.min_score, mode=args.mode, sources=args.sources,
        path_prefix=args.path_prefix, modified_since=args.modified_since, modified_until=args.modified_until,
        filters=args.filters,
    )
    if args.json:
        print(json.dumps(response, ensure_ascii=False, indent=2))
    else:
        _print_results(response)
    return 0


COMMANDS = {"push": command_push, "watch": command_watch, "pull": command_pull, "search": command_search}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed by argparse
        return int(exc.code or 0)
    try:
        return COMMANDS[args.command](args)
    except ConfigError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except ServerError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: one line by default, the traceback with --debug
        if getattr(args, "debug", False):
            raise
        print(f"{PROG}: unexpected error: {type(exc).__name__}: {exc} (run with --debug for details)", file=sys.stderr)
        return 1
