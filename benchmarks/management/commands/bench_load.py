"""Load against a running MemoryHub (`make run`, or the container's gunicorn): many clients at once,
searches and uploads across many agents, and a noisy-neighbour run.

    python manage.py bench_load --url http://127.0.0.1:8000                       # 32 clients, 60 s, 20 agents
    python manage.py bench_load --url http://127.0.0.1:8000 --noisy --duration 30  # one agent floods
    python manage.py bench_load --url http://127.0.0.1:8000 --noisy-indexing --flood-rate 50 --victim-rate 1 --duration 30

The command creates its agents (``bench-load-NN``, tokens minted for the run) in the database this
checkout is configured for, which must be the server's. Each client keeps one HTTP connection and sends
requests back to back: ``--search-share`` of them are ``POST search`` with a random question, the rest
``PUT`` a small note. The report gives per kind the count, p50/p95/p99 latency and every status seen;
any 5xx is a server error.

``--noisy``: first a quiet phase, one well-behaved agent searching at ``--victim-rate`` per second, then
the same agent while every other client floods one noisy agent (searches, uploads and, unless
``--no-big-file``, a 5 MB one-line file); ``--rounds N`` alternates the two phases N times, each
--duration/N long. The victim's p95 in both phases and their ratio are the result:
no tenant may slow the others (the per-token rate limits answer the flood 429; set them to 0 on the
server to see the server's own isolation). The flood ignores Retry-After, as a runaway loop does;
``--flood-obeys-retry-after`` makes it a tenant that uses its whole rate and waits as told.

``--noisy-indexing``: the same two phases for the shared worker queue. The victim uploads a note every
1/``--victim-rate`` seconds and times it until its job is done, alone and then while the other clients
flood the noisy agent with new notes; run the server with an embedding provider that takes time
(``MEMORYHUB_EMBEDDING_PROVIDER=fake MEMORYHUB_EMBEDDING_FAKE_LATENCY=0.2``). The quiet phase starts once
no index job is queued or running, so an earlier run's backlog does not count.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import random
import statistics
import threading
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field

from django.core.management.base import BaseCommand, CommandError

WORDS = (
    "deploy budget meeting kettle dentist invoice launch river hotel garden password backup server "
    "migration coffee friday march roadmap customer contract holiday train ticket doctor birthday"
).split()


@dataclass
class Kind:
    latencies: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)

    def add(self, seconds: float, status: int) -> None:
        self.latencies.append(seconds)
        self.statuses[status] += 1

    def summary(self) -> dict:
        values = sorted(self.latencies)
        if not values:
            return {"requests": 0}

        def pct(p: float) -> float:
            return round(values[min(len(values) - 1, int(p * len(values)))] * 1000, 1)

        return {
            "requests": len(values),
            "p50_ms": pct(0.50),
            "p95_ms": pct(0.95),
            "p99_ms": pct(0.99),
            "mean_ms": round(statistics.fmean(values) * 1000, 1),
            "statuses": dict(sorted(self.statuses.items())),
            "server_errors": sum(n for status, n in self.statuses.items() if status >= 500 or status == 0),
        }


class Client:
    """One keep-alive HTTP connection; reconnects after a failure. Status 0 = no answer."""

    def __init__(self, url: str, timeout: float):
        parts = urllib.parse.urlsplit(url)
        self.host, self.port, self.timeout = parts.hostname, parts.port or 80, timeout
        self.connection: http.client.HTTPConnection | None = None
        self.retry_after = 0.0  # the last answer's Retry-After, in seconds (0 when it had none)

    def send(self, method: str, path: str, token: str, body: bytes | None, content_type: str) -> int:
        return self.call(method, path, token, body, content_type)[0]

    def call(self, method: str, path: str, token: str, body: bytes | None, content_type: str) -> tuple[int, dict]:
        """(status, the JSON answer or {})."""
        headers = {"Authorization": f"Bearer {token}", "Content-Type": content_type}
        for attempt in range(2):
            if self.connection is None:
                self.connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.connection.request(method, path, body=body, headers=headers)
                response = self.connection.getresponse()
                raw = response.read()
                self.retry_after = float(response.getheader("Retry-After") or 0)
                try:
                    answer = json.loads(raw) if raw.startswith(b"{") else {}
                except ValueError:
                    answer = {}
                return response.status, answer
            except (OSError, http.client.HTTPException):
                self.connection.close()
                self.connection = None
                if attempt:
                    return 0, {}
        return 0, {}


class Command(BaseCommand):
    help = "Concurrent search + upload load against a running server, and a noisy-neighbour run."
    flood_client_nice = 0

    def add_arguments(self, parser):
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="the server's root URL")
        parser.add_argument("--clients", type=int, default=32)
        parser.add_argument("--duration", type=float, default=60.0, help="seconds (per phase with --noisy)")
        parser.add_argument("--agents", type=int, default=20)
        parser.add_argument("--search-share", type=float, default=0.7)
        parser.add_argument("--notes", type=int, default=30, help="notes uploaded per agent before the run")
        parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a request counts as no answer")
        parser.add_argument("--noisy", action="store_true", help="the noisy-neighbour run instead")
        parser.add_argument("--victim-rate", type=float, default=5.0, help="--noisy: the quiet agent's searches per second")
        parser.add_argument("--no-big-file", action="store_true", help="--noisy: no 5 MB one-line file")
        parser.add_argument(
            "--rounds", type=int, default=1,
            help="--noisy: alternate the quiet and noisy phases this many times (each --duration/rounds long), so that "
            "a machine whose other load drifts during the run weighs on both phases alike",
        )
        parser.add_argument(
            "--flood-rate", type=float, default=0.0,
            help="--noisy: the noisy agent's requests per second, all clients together (0 = as fast as the server answers)",
        )
        parser.add_argument(
            "--flood-obeys-retry-after", action="store_true",
            help="--noisy: each flooding client told 429 waits its Retry-After (a tenant using its full rate politely) "
            "instead of sending on",
        )
        parser.add_argument(
            "--flood-client-nice", type=int, default=0,
            help="--noisy/--noisy-indexing: run the flooding client at this much lower CPU priority (and out of a real-time "
            "class), so that on one machine it does not take the server's CPU as a remote client would not",
        )
        parser.add_argument(
            "--noisy-indexing", action="store_true",
            help="the noisy-neighbour run for indexing: the victim's upload-to-indexed time while another agent floods uploads",
        )
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **options):
        if not 0 <= options["search_share"] <= 1 or options["clients"] < 1 or options["duration"] <= 0 or options["rounds"] < 1:
            raise CommandError("--clients ≥ 1, --duration > 0, --rounds ≥ 1 and --search-share in 0..1")
        url = options["url"].rstrip("/")
        self.flood_client_nice = options["flood_client_nice"]
        tokens = self._agents(2 if options["noisy"] or options["noisy_indexing"] else options["agents"])
        seed = Client(url, options["timeout"])
        for token in tokens:
            for i in range(options["notes"]):
                status = seed.send("PUT", f"/api/v1/files/notes/n{i:03}.md", token, _note(i).encode(), "text/markdown")
                if status >= 400 and status != 429:
                    raise CommandError(f"seeding failed: PUT answered {status} (is --url this checkout's server?)")
        if options["noisy_indexing"]:
            report = self._noisy_indexing(url, tokens, options)
        elif options["noisy"]:
            report = self._noisy(url, tokens, options)
        else:
            report = self._mixed(url, tokens, options)
        report["settings"] = {
            key: options[key]
            for key in (
                "url", "clients", "duration", "agents", "search_share", "noisy", "flood_rate", "flood_obeys_retry_after",
                "flood_client_nice", "rounds",
            )
        }
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2))
        else:
            self._print(report)

    # --- Set-up ------------------------------------------------------------------------------------

    def _agents(self, count: int) -> list[str]:
        from agents.models import Agent, Team
        from agents.services import agent_create, agent_token_create, team_create

        tokens = []
        for i in range(count):
            slug = f"bench-load-{i:02}"
            # A team each, as separate tenants are: the flood counts against its own team's rate, not the victim's.
            team = Team.objects.filter(slug=slug).first() or team_create(slug=slug)
            agent = Agent.objects.filter(slug=slug).first() or agent_create(slug=slug, team=team)
            tokens.append(agent_token_create(agent=agent, label="bench_load")[1])
        return tokens

    # --- Runs --------------------------------------------------------------------------------------

    def _run(self, url: str, workers: list, duration: float, timeout: float, *, obey_retry_after: bool = False) -> dict[str, Kind]:
        """Each of ``workers`` (a pick of the next request) in a thread of its own, for ``duration``; with
        ``obey_retry_after`` a client told 429 waits the Retry-After it was told before its next request."""
        kinds: dict[str, Kind] = {}
        lock = threading.Lock()
        stop_at = time.monotonic() + duration

        def loop(pick):
            client = Client(url, timeout)
            while time.monotonic() < stop_at:
                step = pick()
                if step is None:
                    continue
                name, method, path, token, body, content_type, pause = step
                started = time.perf_counter()
                status = client.send(method, path, token, body, content_type)
                elapsed = time.perf_counter() - started
                with lock:
                    kinds.setdefault(name, Kind()).add(elapsed, status)
                if obey_retry_after and status == 429:
                    time.sleep(client.retry_after)
                elif pause:
                    time.sleep(max(0.0, pause - elapsed))

        threads = [threading.Thread(target=loop, args=(pick,), daemon=True) for pick in workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(duration + timeout + 5)
        return kinds

    def _run_beside_flood(
        self, url: str, victim, flood_picks: list, duration: float, timeout: float, *, obey_retry_after: bool = False
    ) -> dict[str, Kind]:
        """``victim()`` (its measurements by kind) in this process, the flood's threads in a forked one: the
        victim's latencies are the server's, not the wait for this interpreter's lock among the flood's
        threads (all in one process, the victim's p95 measured its own client as much as the server)."""
        receive, send = multiprocessing.Pipe(duplex=False)

        def flood():
            if self.flood_client_nice:
                # On a one-machine benchmark the flood's own client competes with the server for the same
                # cores, which a remote client would not: it gets what the server and the victim leave.
                if hasattr(os, "sched_setscheduler"):
                    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))  # out of a real-time class
                os.nice(self.flood_client_nice)
            send.send(self._run(url, flood_picks, duration, timeout, obey_retry_after=obey_retry_after))

        flooder = multiprocessing.get_context("fork").Process(target=flood, daemon=True)
        flooder.start()
        kinds = victim()
        if receive.poll(duration + timeout + 10):
            kinds.update(receive.recv())
        flooder.join(5)
        return kinds

    def _noisy_indexing(self, url: str, tokens: list[str], options) -> dict:
        """The victim uploads a new note every 1/--victim-rate seconds and times each until its job is
        done (polling GET jobs/<id>), first alone, then while the other clients flood the noisy agent
        with new notes at --flood-rate. Run the server with an embedding provider that takes time
        (e.g. MEMORYHUB_EMBEDDING_PROVIDER=fake MEMORYHUB_EMBEDDING_FAKE_LATENCY=0.2): what is measured
        is how long the victim's work waits behind the flood's in the shared worker queue."""
        victim, noisy = tokens
        pause, duration = 1.0 / options["victim_rate"], options["duration"]

        def victim_loop() -> dict[str, Kind]:
            kinds: dict[str, Kind] = {}
            client, stop_at, n = Client(url, options["timeout"]), time.monotonic() + duration, 0
            while time.monotonic() < stop_at:
                n += 1
                started = time.perf_counter()
                body = f"# Victim {n}\n\nThe {random.choice(WORDS)} note {n} {random.random():.6f}\n".encode()
                status, answer = client.call("PUT", f"/api/v1/files/victim/v{n:04}.md", victim, body, "text/markdown")
                state = "no job"
                while status in (200, 201) and answer.get("job") and time.perf_counter() - started < options["timeout"]:
                    _, job = client.call("GET", f"/api/v1/jobs/{answer['job']}", victim, None, "application/json")
                    state = job.get("state")
                    if state in ("done", "failed"):
                        break
                    time.sleep(0.05)
                elapsed = time.perf_counter() - started
                kinds.setdefault("victim_indexed", Kind()).add(elapsed, status if state == "done" else 0)
                time.sleep(max(0.0, pause - elapsed))
            return kinds

        settled_in = _queue_settled(options["timeout"] * 10)
        quiet = victim_loop()
        flooders = max(1, options["clients"] - 1)
        flood_pause = flooders / options["flood_rate"] if options["flood_rate"] > 0 else 0

        def noisy_pick():
            i = random.randrange(10_000)
            body = _note(i, random.random()).encode()
            return ("noisy_upload", "PUT", f"/api/v1/files/flood/f{i:04}.md", noisy, body, "text/markdown", flood_pause)

        loud = self._run_beside_flood(url, victim_loop, [noisy_pick] * flooders, duration, options["timeout"])
        quiet_summary, loud_summary = quiet["victim_indexed"].summary(), loud["victim_indexed"].summary()
        return {
            "queue_settled_before_s": settled_in,
            "quiet": {"victim_indexed": quiet_summary},
            "noisy": {kind: stats.summary() for kind, stats in sorted(loud.items())},
            "victim_p95_ratio": round(loud_summary["p95_ms"] / quiet_summary["p95_ms"], 2),
        }

    def _mixed(self, url: str, tokens: list[str], options) -> dict:
        share = options["search_share"]

        def pick():
            token = random.choice(tokens)
            if random.random() < share:
                return ("search", "POST", "/api/v1/search", token, _question(), "application/json", 0)
            i = random.randrange(options["notes"] * 2)
            return ("upload", "PUT", f"/api/v1/files/notes/n{i:03}.md", token, _note(i, random.random()).encode(), "text/markdown", 0)

        started = time.monotonic()
        kinds = self._run(url, [pick] * options["clients"], options["duration"], options["timeout"])
        elapsed = time.monotonic() - started
        report = {kind: stats.summary() for kind, stats in sorted(kinds.items())}
        total = sum(k["requests"] for k in report.values())
        report["total"] = {"requests": total, "per_second": round(total / elapsed, 1), "server_errors": sum(k["server_errors"] for k in report.values())}
        return report

    def _noisy(self, url: str, tokens: list[str], options) -> dict:
        victim, noisy = tokens
        pause = 1.0 / options["victim_rate"]
        rounds = options["rounds"]
        phase = options["duration"] / rounds

        def victim_pick():
            return ("victim_search", "POST", "/api/v1/search", victim, _question(), "application/json", pause)

        def victim_searches() -> dict[str, Kind]:
            return self._run(url, [victim_pick], phase, options["timeout"])

        flooders = max(1, options["clients"] - 1)
        flood_pause = flooders / options["flood_rate"] if options["flood_rate"] > 0 else 0

        def noisy_pick():
            if random.random() < 0.7:
                return ("noisy_search", "POST", "/api/v1/search", noisy, _question(), "application/json", flood_pause)
            i = random.randrange(200)
            body = _note(i, random.random()).encode()
            return ("noisy_upload", "PUT", f"/api/v1/files/flood/f{i:03}.md", noisy, body, "text/markdown", flood_pause)

        quiet: dict[str, Kind] = {}
        loud: dict[str, Kind] = {}
        for n in range(rounds):
            _merge(quiet, victim_searches())
            if n == 0 and not options["no_big_file"]:
                big = ("x" * 90 + " budget deploy kettle ") * (5_000_000 // 112)
                Client(url, options["timeout"]).send("PUT", "/api/v1/files/notes/one-line.md", noisy, big.encode(), "text/markdown")
            _merge(loud, self._run_beside_flood(
                url, victim_searches, [noisy_pick] * flooders, phase, options["timeout"],
                obey_retry_after=options["flood_obeys_retry_after"],
            ))
        quiet_summary, loud_summary = quiet["victim_search"].summary(), loud["victim_search"].summary()
        return {
            "quiet": {"victim_search": quiet_summary},
            "noisy": {kind: stats.summary() for kind, stats in sorted(loud.items())},
            "victim_p95_ratio": round(loud_summary["p95_ms"] / quiet_summary["p95_ms"], 2),
        }

    def _print(self, report: dict) -> None:
        for phase, kinds in report.items():
            if phase == "settings":
                continue
            if not isinstance(kinds, dict) or "requests" in kinds:
                self.stdout.write(f"{phase}: {kinds}")
                continue
            for kind, stats in kinds.items():
                self.stdout.write(f"{phase:>6} {kind:<14} {stats}")
        self.stdout.write(f"settings: {report['settings']}")


def _merge(into: dict[str, Kind], kinds: dict[str, Kind]) -> None:
    for name, kind in kinds.items():
        into.setdefault(name, Kind()).latencies.extend(kind.latencies)
        into[name].statuses.update(kind.statuses)


def _question() -> bytes:
    return json.dumps({"query": " ".join(random.sample(WORDS, 4))}).encode()


def _queue_settled(limit: float) -> float:
    """Wait (up to ``limit`` seconds) until no index job is queued or running, so that a quiet phase does
    not wait behind an earlier run's backlog; the seconds waited."""
    from indexing.models import IndexJob
    from indexing.states import ACTIVE_JOBS

    started = time.monotonic()
    while IndexJob.objects.filter(state__in=ACTIVE_JOBS).exists() and time.monotonic() - started < limit:
        time.sleep(1)
    return round(time.monotonic() - started, 1)


def _note(i: int, salt: float = 0.0) -> str:
    words = random.Random(i).sample(WORDS, 6)
    return f"# Note {i}\n\nWe talked about the {words[0]} and the {words[1]}.\n{words[2]} {words[3]} {words[4]} {words[5]} {salt:.6f}\n"
