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

``--reindex-backlog N``: an upload after a change of embedding model. N backlog agents get ``--notes`` notes
each (their own texts, so no agent's vectors serve another's) and are indexed; the victim times its uploads
until their job is done, first alone for ``--duration``, then right after every backlog agent was put in the
state a model change leaves and its re-embedding job queued, until the backlog is worked off (or
``--duration`` ends). Each upload reports how many re-embedding jobs were still waiting (queued) when it
started and when it was done. The simulated state: the backlog's chunks carry another model's identity
(``<provider>:<model>-previous:<dimensions>``) and the configured identity's embedding cache holds none of
their texts. That is what a restart with another ``MEMORYHUB_EMBEDDING_MODEL`` leaves (chunks of the old
identity, no vector of the new one anywhere), so vector search ignores them and re-embedding has to call
the provider; the jobs are queued by ``agent_reembed``, the service the maintenance sweep calls for each
agent with stale chunks, so they go wherever this checkout's code sends re-embedding (``job_queue``). Run
the server with an embedding provider that takes time, and the command with the server's embedding,
``REDIS_URL`` and ``MEMORYHUB_TASK_QUEUE`` settings (it publishes the jobs itself):

    MEMORYHUB_EMBEDDING_PROVIDER=fake MEMORYHUB_EMBEDDING_FAKE_LATENCY=1 \
        python manage.py bench_load --url http://127.0.0.1:8000 --reindex-backlog 40 --notes 3 --victim-rate 1 --duration 30

One queue for everything (the behaviour before re-indexing had a queue of its own) is the code before
commit 8b4c433: run the server from a checkout of its parent, f59283c, with this file copied in, and the
command from there too (docs/reliability.md).
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
        parser.add_argument(
            "--reindex-backlog", type=int, default=0, metavar="N",
            help="an upload after a change of embedding model: the victim's upload-to-indexed time alone, then while N "
            "other agents' re-embedding jobs (--notes notes each) are worked off",
        )
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **options):
        if not 0 <= options["search_share"] <= 1 or options["clients"] < 1 or options["duration"] <= 0 or options["rounds"] < 1:
            raise CommandError("--clients ≥ 1, --duration > 0, --rounds ≥ 1 and --search-share in 0..1")
        if options["reindex_backlog"] < 0 or (options["reindex_backlog"] and options["notes"] < 1):
            raise CommandError("--reindex-backlog N needs N ≥ 0 and --notes ≥ 1")
        url = options["url"].rstrip("/")
        self.flood_client_nice = options["flood_client_nice"]
        backlog = options["reindex_backlog"]
        if backlog:
            count = 1 + backlog
        else:
            count = 2 if options["noisy"] or options["noisy_indexing"] else options["agents"]
        tokens = self._agents(count)
        seed = Client(url, options["timeout"])
        for n, token in enumerate(tokens):
            for i in range(options["notes"]):
                # The backlog's agents each get texts of their own, so that no agent's re-embedding is
                # answered from the cache another's filled.
                body = _note(i, float(n) if backlog else 0.0).encode()
                status = seed.send("PUT", f"/api/v1/files/{_note_path(i)}", token, body, "text/markdown")
                if status >= 400 and status != 429:
                    raise CommandError(f"seeding failed: PUT answered {status} (is --url this checkout's server?)")
        if backlog:
            report = self._reindex_backlog(url, tokens, options)
        elif options["noisy_indexing"]:
            report = self._noisy_indexing(url, tokens, options)
        elif options["noisy"]:
            report = self._noisy(url, tokens, options)
        else:
            report = self._mixed(url, tokens, options)
        report["settings"] = {
            key: options[key]
            for key in (
                "url", "clients", "duration", "agents", "search_share", "noisy", "flood_rate", "flood_obeys_retry_after",
                "flood_client_nice", "rounds", "reindex_backlog", "notes", "victim_rate",
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
        duration = options["duration"]

        def victim_loop() -> dict[str, Kind]:
            return self._victim_uploads(url, victim, options, duration)

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

    def _victim_uploads(
        self, url: str, victim: str, options, duration: float, *, until=None, observe=None
    ) -> dict[str, Kind]:
        """The victim uploads a new note every 1/--victim-rate seconds and times each until its job is done
        (polling GET jobs/<id>; a job that failed or did not finish within --timeout counts as status 0),
        for ``duration`` seconds or until ``until()`` is true after an upload (so at least one is timed);
        ``observe(at_done)`` is called before each upload (False) and once it is done (True)."""
        kinds: dict[str, Kind] = {}
        pause = 1.0 / options["victim_rate"]
        client, stop_at, n = Client(url, options["timeout"]), time.monotonic() + duration, 0
        while time.monotonic() < stop_at and not (n and until and until()):
            n += 1
            if observe:
                observe(False)
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
            if observe:
                observe(True)
            time.sleep(max(0.0, pause - elapsed))
        return kinds

    def _reindex_backlog(self, url: str, tokens: list[str], options) -> dict:
        """The victim's upload-to-indexed time alone, then right after every other agent was given a
        re-embedding job as after a change of embedding model (``reembedding_backlog_queue``), while that
        backlog is worked off. Run the server with an embedding provider that takes time."""
        from agents.models import Agent
        from indexing.models import IndexJob
        from indexing.states import ACTIVE_JOBS

        victim = tokens[0]
        backlog_agents = [f"bench-load-{i:02}" for i in range(1, len(tokens))]
        agent_ids = list(Agent.objects.filter(slug__in=backlog_agents).values_list("id", flat=True))
        paths = [_note_path(i) for i in range(options["notes"])]
        settled_in = _queue_settled(options["timeout"] * 10)
        quiet = self._victim_uploads(url, victim, options, options["duration"])

        jobs = reembedding_backlog_queue(agent_ids=agent_ids, paths=paths)
        queued_at = time.monotonic()
        waiting = {False: [], True: []}  # backlog jobs still queued when each upload started / was done

        def observe(at_done: bool) -> None:
            waiting[at_done].append(_jobs_in(jobs, (IndexJob.State.QUEUED,)))

        loud = self._victim_uploads(
            url, victim, options, options["duration"], until=lambda: not _jobs_in(jobs, ACTIVE_JOBS), observe=observe
        )
        left = _jobs_in(jobs, ACTIVE_JOBS)
        worked_off = _jobs_finished(jobs, options["timeout"] * 10)
        quiet_summary, loud_summary = quiet["victim_indexed"].summary(), loud["victim_indexed"].summary()
        return {
            "queue_settled_before_s": settled_in,
            "backlog_jobs": len(jobs),
            "quiet": {"victim_indexed": quiet_summary},
            "backlog": {"victim_indexed": loud_summary},
            "backlog_waiting_at_upload": waiting[False],
            "backlog_waiting_when_indexed": waiting[True],
            "backlog_left_after_phase": left,
            # From the queueing to the last backlog job's end (None: not within 10 × --timeout).
            "backlog_worked_off_s": round(time.monotonic() - queued_at, 1) if worked_off else None,
            "victim_p50_ratio": round(loud_summary["p50_ms"] / quiet_summary["p50_ms"], 2),
            "victim_p95_ratio": round(loud_summary["p95_ms"] / quiet_summary["p95_ms"], 2),
        }

    def _mixed(self, url: str, tokens: list[str], options) -> dict:
        share = options["search_share"]

        def pick():
            token = random.choice(tokens)
            if random.random() < share:
                return ("search", "POST", "/api/v1/search", token, _question(), "application/json", 0)
            i = random.randrange(options["notes"] * 2)
            return ("upload", "PUT", f"/api/v1/files/{_note_path(i)}", token, _note(i, random.random()).encode(), "text/markdown", 0)

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


def _jobs_in(job_ids: list[int], states) -> int:
    from indexing.models import IndexJob

    return IndexJob.objects.filter(pk__in=job_ids, state__in=states).count()


def _jobs_finished(job_ids: list[int], limit: float) -> bool:
    """Wait (up to ``limit`` seconds) until none of these jobs is queued or running; False if some still are."""
    from indexing.states import ACTIVE_JOBS

    started = time.monotonic()
    while _jobs_in(job_ids, ACTIVE_JOBS):
        if time.monotonic() - started > limit:
            return False
        time.sleep(0.2)
    return True


# The model a backlog's chunks are said to have been embedded with (reembedding_backlog_queue).
PREVIOUS_MODEL_SUFFIX = "-previous"


def reembedding_backlog_queue(*, agent_ids: list[int], paths: list[str]) -> list[int]:
    """Put these agents' files at ``paths`` in the state a change of embedding model leaves, and queue
    their re-embedding as the maintenance sweep does; the jobs queued, one per agent.

    A restart with another MEMORYHUB_EMBEDDING_MODEL leaves every chunk under the old identity and no
    vector of the new one, in the chunks or in the shared embedding cache. Here the files' chunks are
    relabelled with the configured identity's model plus ``-previous`` (same provider and dimensions, as
    a change between two models of one size), and the configured identity's cache entries for their
    texts are deleted, so re-embedding calls the provider for every chunk as it would after a real
    change. The jobs come from ``agent_reembed`` (indexing/maintenance.py), published on commit by the
    code's own ``job_queue``. All of it is one transaction: a maintenance sweep running meanwhile sees
    either nothing stale or the files already pending, never queues them a second time."""
    from django.db import transaction

    from agents.models import Agent
    from indexing.embedding_identity import configured_identity
    from indexing.maintenance import agent_reembed
    from indexing.models import Chunk, EmbeddingCache

    identity = configured_identity()
    if not identity.has_vectors:
        raise CommandError("a re-embedding backlog needs an embedding provider (MEMORYHUB_EMBEDDING_PROVIDER)")
    chunks = Chunk.objects.filter(agent_id__in=agent_ids, file__path__in=paths)
    found = set(chunks.values_list("embedding_identity", flat=True).distinct())
    if found != {identity.key}:
        raise CommandError(
            f"the backlog's chunks carry {sorted(found)}, not this checkout's {identity.key!r}: run the command with "
            "the server's MEMORYHUB_EMBEDDING_* settings, once the backlog's notes are indexed"
        )
    previous = f"{identity.provider}:{identity.model}{PREVIOUS_MODEL_SUFFIX}:{identity.dimensions}"
    with transaction.atomic():
        digests = list(chunks.values_list("text_hash", flat=True))
        EmbeddingCache.objects.filter(
            provider=identity.provider, model=identity.model, dimensions=identity.dimensions, text_hash__in=digests
        ).delete()
        chunks.update(embedding_identity=previous)
        jobs = [agent_reembed(agent=agent) for agent in Agent.objects.filter(id__in=agent_ids).order_by("id")]
    return [job.id for job in jobs if job is not None]


def _note_path(i: int) -> str:
    return f"notes/n{i:03}.md"


def _note(i: int, salt: float = 0.0) -> str:
    words = random.Random(i).sample(WORDS, 6)
    return f"# Note {i}\n\nWe talked about the {words[0]} and the {words[1]}.\n{words[2]} {words[3]} {words[4]} {words[5]} {salt:.6f}\n"
