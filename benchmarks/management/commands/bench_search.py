"""Search quality benchmark against the live HTTP API, on the two dev sets (benchmarks/bench_data.py).

    MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 python manage.py bench_search [--json]
        [--data FILE ...] [--part tune|confirm|all] [--set MEMORYHUB_SEARCH_X=value ...]
        [--mode hybrid|vector|keyword] [--base-url URL]

Each --data file is a LoCoMo file or a meetings file (recognised by shape); a LoCoMo file also gives
the dialogue-shaped set derived from it (long dialogue as the query, short dated notes as memories;
--no-dialogue leaves it out). The default is both dev sets, locomo-dev.json and qmsum-dev.json, in
../shared/data/ beside the checkout (not shipped: the README's "Benchmarks" and docs/search.md name
where they come from). One agent per
conversation or meeting workspace (created in the configured database, deleted afterwards unless
--keep), its files uploaded through `POST /api/v1/sync`, `status.pending` awaited, then every question
sent to `POST /api/v1/search` with the defaults. Figures are reported per set for its tune and confirm
parts and for both together. Without --base-url the command starts
its own gunicorn on a free local port, on the same database, indexing inside the web process
(MEMORYHUB_TASKS_EAGER=1) and with the --set overrides in its environment. With --base-url the
server must use the same database (the agents are created here) and its own settings.

Evidence matching and metrics: benchmarks/locomo.py.
"""

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import asdict
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from agents.deletion import agent_delete_here
from agents.models import Agent
from search.expansion import memory_words_sync
from agents.services import agent_create, agent_token_create
from benchmarks.bench_data import PARTS, dev_sets_load
from benchmarks.locomo import percentile, question_details, question_score, scores_summary



def _data_dir() -> Path:
    """``shared/data`` beside the checkout, or beside one of its parents (a git worktree kept in a
    folder of its own, e.g. ``wt/<branch>``, finds the one beside the main checkout's folder)."""
    base = Path(settings.BASE_DIR).resolve()
    for parent in base.parents:
        if (parent / "shared" / "data").is_dir():
            return parent / "shared" / "data"
    return base.parent / "shared" / "data"  # named in the error when it is missing


DATA_DIR = _data_dir()
DEFAULT_DATA = [DATA_DIR / "locomo-dev.json", DATA_DIR / "qmsum-dev.json"]
OVERRIDABLE = ("MEMORYHUB_SEARCH_", "MEMORYHUB_CHUNK_")


class Api:
    """A tiny JSON client for one agent's token (urllib: no dependency, and no connection reuse, as a
    fresh agent process would do)."""

    def __init__(self, base_url: str, token: str, timeout: float, agent_id: int = 0):
        self.base_url, self.token, self.timeout = base_url.rstrip("/"), token, timeout
        self.agent_id = agent_id  # the agent the token belongs to (this command created it)

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        request = urllib.request.Request(
            f"{self.base_url}/api/v1/{path}",
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        for _ in range(100):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as exc:
                if exc.code == 429:  # a --base-url server's rate limit: wait as told
                    time.sleep(float(exc.headers.get("Retry-After") or 1))
                    continue
                raise CommandError(f"{method} /api/v1/{path} answered {exc.code}: {exc.read()[:500]!r}") from exc
            except urllib.error.URLError as exc:
                raise CommandError(f"{method} /api/v1/{path} failed: {exc.reason}") from exc
        raise CommandError(f"{method} /api/v1/{path} was still rate-limited after 100 tries")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def web_server(*, overrides: dict[str, str], startup_timeout: float = 180):
    """gunicorn on a free port of 127.0.0.1 with this process's database; yields its base URL."""
    from benchmarks.management.commands.bench_ingest import database_url

    port = _free_port()
    env = {
        **os.environ, **overrides, "DATABASE_URL": database_url(), "MEMORYHUB_TASKS_EAGER": "1",
        "DEBUG": "0", "SECRET_KEY": secrets.token_urlsafe(32), "ALLOWED_HOSTS": "127.0.0.1",
        # Questions go back to back, far faster than an agent asks: no per-token rate for this server.
        "MEMORYHUB_RATE_LIMIT_SEARCH": "0", "MEMORYHUB_RATE_LIMIT_SYNC": "0", "MEMORYHUB_RATE_LIMIT_READ": "0",
        "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
    }
    log = tempfile.NamedTemporaryFile("w+", prefix="bench-search-web-", suffix=".log", delete=False)
    process = subprocess.Popen(
        # One process: the questions are sent one at a time, and a second copy of the model would only cost memory.
        [sys.executable, "-m", "gunicorn", "memoryhub.wsgi:application", "--bind", f"127.0.0.1:{port}",
         "--workers", "1", "--threads", "4", "--timeout", "900"],
        cwd=settings.BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if process.poll() is not None:
                raise CommandError(f"the web server exited with {process.returncode}; see {log.name}")
            try:
                urllib.request.urlopen(f"{base_url}/healthz", timeout=5).close()
                break
            except urllib.error.HTTPError:
                break  # it answers (503 only says the broker is down, which eager tasks do not need)
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise CommandError(f"the web server did not answer in {startup_timeout:.0f} s; see {log.name}")
                time.sleep(0.3)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def _parse_overrides(values: list[str]) -> dict[str, str]:
    overrides = {}
    for item in values:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key.startswith(OVERRIDABLE):
            raise CommandError(f"--set takes KEY=VALUE with a key starting {' or '.join(OVERRIDABLE)}; got {item!r}")
        overrides[key] = value
    return overrides


class Command(BaseCommand):
    help = "Run the search-quality benchmark (LoCoMo and meetings) through the live search API: recall, hit rate, MRR, latency."

    def add_arguments(self, parser):
        parser.add_argument("--data", action="append", default=[], help="a dev-set file, repeatable (default: both dev sets in ../shared/data/)")
        parser.add_argument("--part", choices=PARTS, default="all", help="the tune or confirm part of each set, or all (default)")
        parser.add_argument("--base-url", default="", help="a running MemoryHub on this database (default: start one)")
        parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                            help="a MEMORYHUB_SEARCH_* / MEMORYHUB_CHUNK_* setting for the server this command starts")
        parser.add_argument("--mode", choices=["hybrid", "vector", "keyword"], help="send this mode instead of the default")
        parser.add_argument("--conversations", type=int, default=0, help="only the first N conversations of each set")
        parser.add_argument("--no-dialogue", action="store_true",
                            help="leave out the dialogue-shaped set derived from a LoCoMo file (benchmarks/bench_data.py)")
        parser.add_argument("--only", action="append", default=[], choices=["locomo", "dialogue", "meetings"],
                            help="run only this set, repeatable")
        parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
        parser.add_argument("--details", default="", help="write one JSON line per question to this file")
        parser.add_argument("--keep", action="store_true", help="keep the agents (and their files) afterwards")
        parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for indexing")

    def handle(self, *args, **options):
        overrides = _parse_overrides(options["overrides"])
        if options["base_url"] and overrides:
            raise CommandError("--set configures the server this command starts; it cannot change a --base-url server")
        dev_sets = []
        for path in options["data"] or DEFAULT_DATA:
            try:
                loaded = dev_sets_load(path, dialogue=not options["no_dialogue"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise CommandError(f"cannot read the dev set {path}: {exc}") from exc
            for dev in loaded:
                if options["only"] and dev.name not in options["only"]:
                    continue
                dev.conversations = [c for c in dev.conversations if options["part"] in ("all", c.part)]
                if options["conversations"]:
                    dev.conversations = dev.conversations[: options["conversations"]]
                dev_sets.append((str(path), dev))

        load_before = os.getloadavg()
        server = contextlib.nullcontext(options["base_url"]) if options["base_url"] else web_server(overrides=overrides)
        run = uuid.uuid4().hex[:6]
        agents: list[Agent] = []
        sets = {}
        details = open(options["details"], "w") if options["details"] else None
        try:
            with server as base_url:
                for path, dev in dev_sets:
                    apis = []
                    for conversation in dev.conversations:
                        agent = agent_create(slug=f"bench-{dev.name}-{len(agents)}-{run}")
                        agents.append(agent)
                        _, token = agent_token_create(agent=agent, label="bench_search")
                        apis.append(Api(base_url, token, timeout=options["timeout"], agent_id=agent.pk))
                    index = self._upload(dev.conversations, apis, timeout=options["timeout"])
                    sets[dev.name] = {"data": path, "index": index, **self._ask(
                        dev, apis, mode=options["mode"], details=details,
                        vectors=bool(index["embedding"].get("vector_search")) and options["mode"] != "keyword",
                    )}
        finally:
            if details:
                details.close()
            if not options["keep"]:
                for agent in agents:
                    agent_delete_here(agent_id=agent.pk)
        report = {
            "sets": sets, "part": options["part"], "base_url": options["base_url"] or "started by the command",
            "overrides": overrides, "mode_sent": options["mode"] or "default",
            "load_average": {"before": list(load_before), "after": list(os.getloadavg()), "cpus": os.cpu_count()},
        }
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2))
        else:
            self._print(report)

    def _upload(self, conversations, apis, *, timeout: float) -> dict:
        started = time.perf_counter()
        for conversation, api in zip(conversations, apis):
            files = [{"path": path, "content": content} for path, content in conversation.files.items()]
            api.call("POST", "sync", {"files": files})
        deadline = time.monotonic() + timeout
        statuses = []
        for api in apis:
            while (status := api.call("GET", "status"))["pending"]:
                if time.monotonic() > deadline:
                    raise CommandError(f"indexing still pending after {timeout:.0f} s: {status}")
                time.sleep(0.5)
            statuses.append(status)
        # Keyword expansion's words (search/expansion.py), read and embedded here as the periodic task would:
        # the questions must not race the task's next run.
        words = memory_words_sync(agent_ids=[api.agent_id for api in apis])
        failed = sum(status["failed"] for status in statuses)
        if failed:
            self.stderr.write(f"warning: {failed} files failed to index; they count as not found")
        return {
            "files": sum(status["files"] for status in statuses),
            "chunks": sum(status["chunks"] for status in statuses),
            "failed": failed,
            "seconds": round(time.perf_counter() - started, 2),
            "embedding": statuses[0]["embedding"] if statuses else {},
            "memory_words": {"added": words.words_added, "embedded": words.words_embedded, "errors": len(words.errors)},
        }

    @staticmethod
    def _warm_up(api, *, vectors: bool, timeout: float = 180) -> None:
        """Load the query embedder (not timed). When every chunk came from the embedding cache, the web
        process has not loaded the model yet, and loading it outlasts the query embedding's time limit
        (and opens the breaker): wait until searches use vectors again, so no question is answered by
        keywords alone for that reason."""
        deadline = time.monotonic() + timeout
        while api.call("POST", "search", {"query": "warm up"}).get("mode") == "keyword" and vectors:
            if time.monotonic() > deadline:
                raise CommandError(f"searches still answer by keyword only after {timeout:.0f} s: is the embedding provider up?")
            time.sleep(1)

    def _ask(self, dev, apis, *, mode: str | None, details, vectors: bool = False) -> dict:
        scores_by_part: dict[str, list] = {"tune": [], "confirm": []}
        client_ms, server_ms, modes = [], [], set()
        for conversation, api in zip(dev.conversations, apis):
            self._warm_up(api, vectors=vectors)
            for question in conversation.questions:
                body = {"query": question.text} | ({"mode": mode} if mode else {})
                t0 = time.perf_counter()
                response = api.call("POST", "search", body)
                client_ms.append((time.perf_counter() - t0) * 1000)
                server_ms.append(float(response.get("took_ms", 0.0)))
                modes.add(response.get("mode"))
                score = question_score(question=question, turns=conversation.turns, results=response["results"])
                scores_by_part[conversation.part].append(score)
                if details:
                    line = question_details(
                        set_name=dev.name, conversation=conversation, question=question, score=score, results=response["results"]
                    )
                    details.write(json.dumps(line) + "\n")
        everything = scores_by_part["tune"] + scores_by_part["confirm"]
        return {
            "conversations": len(dev.conversations),
            "skipped_questions": sum(c.skipped_questions for c in dev.conversations),
            "modes_answered": sorted(m for m in modes if m),
            **asdict(scores_summary(everything, dev.categories)),
            "parts": {part: asdict(scores_summary(scores, dev.categories)) for part, scores in scores_by_part.items() if scores},
            "latency_ms": {
                "client_p50": round(percentile(client_ms, 0.5), 1), "client_p95": round(percentile(client_ms, 0.95), 1),
                "server_p50": round(percentile(server_ms, 0.5), 1), "server_p95": round(percentile(server_ms, 0.95), 1),
            },
        }

    def _print(self, report: dict) -> None:
        out = self.stdout.write
        out(f"server: {report['base_url']}; mode sent: {report['mode_sent']}; part: {report['part']}")
        if report["overrides"]:
            out("settings: " + " ".join(f"{k}={v}" for k, v in report["overrides"].items()))
        for name, r in report["sets"].items():
            embedding = r["index"]["embedding"]
            out("")
            out(f"{name} ({r['data']}): {r['conversations']} agents, {r['questions']} questions "
                f"({r['skipped_questions']} without usable evidence skipped), {r['evidence_turns']} evidence turns; "
                f"answered: {', '.join(r['modes_answered'])}")
            out(f"embedding {embedding.get('provider')} {embedding.get('model') or ''} ({embedding.get('dimensions')} dims); "
                f"indexed {r['index']['files']} files into {r['index']['chunks']} chunks in {r['index']['seconds']:.1f} s"
                + (f" ({r['index']['failed']} failed)" if r["index"]["failed"] else ""))
            rows = [("all", r)] + [(part, summary) for part, summary in r["parts"].items()]
            for label, summary in rows:
                out(f"  {label:<8} evidence recall {summary['evidence_recall']:.3f}   hit rate {summary['hit_rate']:.3f}   "
                    f"MRR {summary['mrr']:.3f}   ({summary['questions']} questions)")
                for category, c in summary["categories"].items():
                    if c["questions"]:
                        out(f"    {category:<10} {c['name']:<12} {c['questions']:>4} questions   recall {c['evidence_recall']:.3f}   "
                            f"hit {c['hit_rate']:.3f}   MRR {c['mrr']:.3f}")
            out(f"  evidence turns found {r['evidence_found']} of {r['evidence_turns']}; of the missed, "
                f"{r['missed_in_shown_file']} were in a shown file ({r['missed_near_snippet']} within 2 lines of a snippet)")
            latency = r["latency_ms"]
            out(f"  latency: client p50 {latency['client_p50']:.1f} ms, p95 {latency['client_p95']:.1f} ms; "
                f"server took_ms p50 {latency['server_p50']:.1f} ms, p95 {latency['server_p95']:.1f} ms")
        load = report["load_average"]
        out("load average before %.2f %.2f %.2f, after %.2f %.2f %.2f (%d CPUs)" % (*load["before"], *load["after"], load["cpus"]))
