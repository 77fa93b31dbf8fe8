"""Time the sync client against a running server: ``python -m memoryhub_client.bench --files 2000``.

Writes a synthetic agent workspace into a temporary folder (daily notes under ``memory/``, JSONL
transcripts under ``sessions/``, plain notes under ``notes/``, ~2 kB each, deterministic), then times,
end to end on the client, a first push (and until the server has indexed it), an unchanged re-push,
and a push after editing one file. It
pushes under its own ``--prefix`` (default ``bench/``) and deletes those files again at the end, so the
agent's other files are left alone. Needs MEMORYHUB_URL / MEMORYHUB_TOKEN (or --url / --token).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from memoryhub_client.api import ApiClient
from memoryhub_client.errors import ConfigError, ServerError
from memoryhub_client.push import PushOptions, workspace_push

WORDS = (
    "garden tomato fence invoice meeting dana river recipe budget train ticket sister birthday lamp "
    "router password plumber library novel chapter deadline report coffee tea hiking boots camera lens "
    "paris berlin tokyo flight hotel museum violin lesson doctor dentist vitamin yoga marathon bicycle"
).split()


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16))).capitalize() + "."


def workspace_generate(root: Path, *, files: int, seed: int = 7) -> int:
    """Write ``files`` files (80 % notes, 10 % transcripts, 10 % text) into ``root``; returns total bytes."""
    rng = random.Random(seed)
    total = 0
    start = datetime.date(2020, 1, 1)
    for index in range(files):
        kind = index % 10
        if kind < 8:
            day = start + datetime.timedelta(days=index)
            body = f"# {day.isoformat()}\n\n" + "\n\n".join(
                f"## {rng.choice(WORDS).title()}\n\n" + " ".join(_sentence(rng) for _ in range(3)) for _ in range(4)
            )
            path = root / "memory" / f"{day.isoformat()}.md"
        elif kind == 8:
            lines = [
                json.dumps({"role": role, "content": _sentence(rng)})
                for role in ("user", "assistant") * 8
            ]
            body = "\n".join(lines)
            path = root / "sessions" / f"session-{index:05d}.jsonl"
        else:
            body = "\n".join(_sentence(rng) for _ in range(14))
            path = root / "notes" / f"note-{index:05d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        data = (body + "\n").encode()
        path.write_bytes(data)
        total += len(data)
    return total


def _wait_until_indexed(client: ApiClient, *, timeout: float = 600.0) -> float:
    started = time.monotonic()
    while client.status().get("pending") and time.monotonic() - started < timeout:
        time.sleep(0.1)
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memoryhub_client.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--prefix", default="bench/")
    parser.add_argument("--url", default=os.environ.get("MEMORYHUB_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--token", default=os.environ.get("MEMORYHUB_TOKEN", ""))
    args = parser.parse_args(argv)
    try:
        client = ApiClient(url=args.url, token=args.token)
        with tempfile.TemporaryDirectory(prefix="memoryhub-bench-") as folder:
            root = Path(folder)
            size = workspace_generate(root, files=args.files)
            options = PushOptions(prefix=args.prefix)
            print(f"workspace: {args.files} files, {size / 1_048_576:.1f} MB, pushed under {args.prefix!r} to {client.root}")
            for label in ("first push", "unchanged re-push", "one file edited"):
                if label == "one file edited":
                    edited = next((root / "memory").iterdir())
                    edited.write_text(edited.read_text() + "\nOne more line.\n")
                result = workspace_push(client=client, root=root, options=options)
                print(f"{label:<18} {result.seconds:6.2f} s   {result.summary()}")
                if label == "first push":
                    waited = _wait_until_indexed(client)
                    print(f"{'  … all indexed':<18} {result.seconds + waited:6.2f} s   (GET status until pending is 0)")
            # Tidy up in one request: an empty listing with delete_missing, scoped to the prefix.
            client.sync(files=[], delete_missing=True, prefix=args.prefix.strip("/") + "/")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
