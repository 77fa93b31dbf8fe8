"""Search-quality variants compared in-process, on the dev sets of bench_search (docs/search.md).

    MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 python manage.py bench_variants \
        [--data FILE ...] [--part tune|confirm|all] [--only locomo|dialogue|meetings ...] \
        [--variant 'NAME:MEMORYHUB_SEARCH_X=value,MEMORYHUB_SEARCH_Y=value' ...] [--reuse TAG] [--json] \
        [--details DIR] [--timing ROUNDS]

The benchmark agents are indexed once through the real pipeline (workspace_sync, indexing in this
process), then every question of every variant goes to ``search.services.memory_search`` with the
variant's settings (``override_settings``) and is scored with benchmarks/locomo.py's question_score:
the same protocol as bench_search without HTTP, so a variant costs the questions' searches, not a
re-index. The first variant is always the defaults ("default"). Only search-time settings
(MEMORYHUB_SEARCH_*) can vary here; a chunking change needs a re-index (bench_search --set).

``--timing ROUNDS`` also times ``memory_search`` for every variant, interleaved: each question is searched
once to cache its query embedding, then ROUNDS times under every variant, the variants' order turning from
one search to the next, so that a busy moment of the machine or the order of the runs falls on all of them
alike. It reports each variant's p50 / p95 per set: the cost of a search-time setting, measured against the
defaults in the same run.

``--reuse TAG`` keeps the agents (slugs ``variants-TAG-...``) and uses them again on the next run
with the same TAG when their files are all indexed, so a session of comparisons indexes once. A TAG
stands for one index: after a change to chunking or embeddings, use another TAG.
"""

import json
import os
import time
import uuid
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.test import override_settings

from agents.deletion import agent_delete_here
from agents.models import Agent
from search.expansion import memory_words_sync
from agents.services import agent_create
from benchmarks.bench_data import PARTS, dev_sets_load
from benchmarks.locomo import percentile, question_details, question_score, scores_summary
from benchmarks.management.commands.bench_search import DEFAULT_DATA
from indexing.embeddings import get_provider
from indexing.models import MemoryFile
from indexing.writes import SyncEntry, workspace_sync
from memoryhub.celery import app as celery_app
from search.services import memory_search

VARIABLE = "MEMORYHUB_SEARCH_"
# Quality, not latency: a query embedding or a statement slowed down by a busy machine must not turn a
# question into a keyword-only search (the model is also loaded before the first question).
UNHURRIED = {
    "MEMORYHUB_SEARCH_QUERY_EMBEDDING_TIMEOUT": 120.0,
    "MEMORYHUB_SEARCH_DEADLINE_MS": 120_000,
    "MEMORYHUB_SEARCH_STATEMENT_TIMEOUT_MS": 60_000,
}


def _value(text: str):
    if text.lower() in ("true", "false"):  # a boolean setting: the string "false" would read as true
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def variant_parse(spec: str) -> tuple[str, dict]:
    """'name:KEY=VALUE,KEY=VALUE' -> (name, {KEY: value}); values are ints, floats or strings."""
    name, sep, body = spec.partition(":")
    if not sep or not name.strip():
        raise CommandError(f"--variant takes NAME:KEY=VALUE[,KEY=VALUE]; got {spec!r}")
    values = {}
    for item in filter(None, (part.strip() for part in body.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.startswith(VARIABLE):
            raise CommandError(f"--variant settings are {VARIABLE}*=VALUE; got {item!r}")
        values[key] = _value(value)
    return name.strip(), values


def _indexed(agent: Agent, expected_files: int) -> bool:
    """Whether all of the agent's files are stored and settled (indexed, or failed: see _failed)."""
    files = MemoryFile.objects.filter(agent=agent)
    unsettled = files.filter(state__in=[MemoryFile.State.PENDING, MemoryFile.State.INDEXING])
    return files.count() == expected_files and not unsettled.exists()


class Command(BaseCommand):
    help = "Compare search settings in-process on the dev sets (indexed once): evidence recall per set, part and variant."

    def add_arguments(self, parser):
        parser.add_argument("--data", action="append", default=[], help="a dev-set file, repeatable (default: bench_search's)")
        parser.add_argument("--part", choices=PARTS, default="tune", help="the part of each set to ask (default: tune)")
        parser.add_argument("--only", action="append", default=[], choices=["locomo", "dialogue", "meetings"],
                            help="only this set, repeatable")
        parser.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=VALUE[,KEY=VALUE]",
                            help="search settings to compare with the defaults, repeatable")
        parser.add_argument("--reuse", default="", metavar="TAG", help="keep the indexed agents under this tag and reuse them")
        parser.add_argument("--mode", choices=["hybrid", "vector", "keyword"], help="search mode (default: the default)")
        parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
        parser.add_argument("--details", default="", help="write DIR/<variant>.jsonl, one line per question")
        parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for indexing")
        parser.add_argument("--timing", type=int, default=0, metavar="ROUNDS",
                            help="also time every variant's searches, interleaved, ROUNDS times each (default: 0, no timing)")

    def handle(self, *args, **options):
        variants = [("default", {})] + [variant_parse(spec) for spec in options["variant"]]
        if len({name for name, _ in variants}) != len(variants):
            raise CommandError("variant names must be distinct (and not 'default')")
        dev_sets = []
        for path in options["data"] or DEFAULT_DATA:
            for dev in dev_sets_load(path):
                if options["only"] and dev.name not in options["only"]:
                    continue
                dev_sets.append(dev)
        tag = options["reuse"] or uuid.uuid4().hex[:6]
        details_dir = Path(options["details"]) if options["details"] else None
        if details_dir:
            details_dir.mkdir(parents=True, exist_ok=True)
        load_before = os.getloadavg()
        agents: list[Agent] = []
        report: dict = {"part": options["part"], "variants": {name: values for name, values in variants}, "sets": {}}
        try:
            indexed = {dev.name: self._index(dev, tag=tag, agents=agents, timeout=options["timeout"]) for dev in dev_sets}
            provider = get_provider()
            if provider is not None:
                provider.embed_query("warm up")  # loads a local model outside any time limit
            for name, values in variants:
                started = time.perf_counter()
                details = open(details_dir / f"{name}.jsonl", "w") if details_dir else None
                try:
                    with override_settings(**{**UNHURRIED, **values}):
                        for dev in dev_sets:
                            result = self._ask(dev, indexed[dev.name], part=options["part"], mode=options["mode"], details=details)
                            report["sets"].setdefault(dev.name, {})[name] = result
                finally:
                    if details:
                        details.close()
                if not options["json"]:
                    self._print_variant(name, values, report, seconds=time.perf_counter() - started)
            if options["timing"] > 0:
                report["timing"] = {
                    dev.name: self._time(dev, indexed[dev.name], variants=variants, part=options["part"], mode=options["mode"],
                                         rounds=options["timing"])
                    for dev in dev_sets
                }
                if not options["json"]:
                    self._print_timing(report["timing"])
        finally:
            if not options["reuse"]:
                for agent in agents:
                    agent_delete_here(agent_id=agent.pk)
        report["load_average"] = {"before": list(load_before), "after": list(os.getloadavg()), "cpus": os.cpu_count()}
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2))
        else:
            load = report["load_average"]
            self.stdout.write("load average before %.2f %.2f %.2f, after %.2f %.2f %.2f (%d CPUs)" % (*load["before"], *load["after"], load["cpus"]))

    def _index(self, dev, *, tag: str, agents: list, timeout: float) -> list[Agent]:
        """One agent per conversation of ``dev``, its files synced and indexed in this process."""
        eager = celery_app.conf.task_always_eager
        celery_app.conf.task_always_eager = True
        out = []
        try:
            for number, conversation in enumerate(dev.conversations):
                slug = f"variants-{tag}-{dev.name}-{number}"
                agent = Agent.objects.filter(slug=slug).first()
                if agent is not None and _indexed(agent, len(conversation.files)):
                    out.append(agent)
                    continue
                if agent is not None:
                    agent_delete_here(agent_id=agent.pk)
                agent = agent_create(slug=slug)
                agents.append(agent)
                workspace_sync(agent=agent, entries=[SyncEntry(path=p, content=c) for p, c in conversation.files.items()])
                deadline = time.monotonic() + timeout
                while not _indexed(agent, len(conversation.files)):
                    if time.monotonic() > deadline:
                        raise CommandError(f"{slug}: indexing did not finish in {timeout:.0f} s")
                    time.sleep(0.5)
                out.append(agent)
        finally:
            celery_app.conf.task_always_eager = eager
        memory_words_sync(agent_ids=[agent.pk for agent in out])  # keyword expansion's words, as the periodic task would
        failed = MemoryFile.objects.filter(agent__in=out, state=MemoryFile.State.FAILED).count()
        if failed:
            self.stderr.write(f"warning: {failed} files of {dev.name} failed to index; their evidence counts as not found")
        return out

    @staticmethod
    def _ask(dev, agents, *, part: str, mode, details) -> dict:
        scores = {"tune": [], "confirm": []}
        modes = Counter()
        for conversation, agent in zip(dev.conversations, agents):
            if part not in ("all", conversation.part):
                continue
            for question in conversation.questions:
                response = memory_search(agent=agent, query=question.text, mode=mode)
                modes[response.mode] += 1
                results = [
                    {"path": r.path, "start_line": r.start_line, "end_line": r.end_line, "snippet": r.snippet, "score": r.score}
                    for r in response.results
                ]
                score = question_score(question=question, turns=conversation.turns, results=results)
                scores[conversation.part].append(score)
                if details:
                    line = question_details(
                        set_name=dev.name, conversation=conversation, question=question, score=score, results=results
                    )
                    line["question"] = line["question"][:300]  # a dialogue-shaped query is a whole session
                    details.write(json.dumps(line) + "\n")
        return {"modes_answered": dict(modes)} | {p: asdict(scores_summary(s, dev.categories)) for p, s in scores.items() if s}

    @staticmethod
    def _time(dev, agents, *, variants: list, part: str, mode, rounds: int) -> dict:
        """Each variant's memory_search p50 / p95 (ms) over the questions of ``part``, interleaved (--timing)."""
        took: dict[str, list[float]] = {name: [] for name, _ in variants}
        turn = 0
        for conversation, agent in zip(dev.conversations, agents):
            if part not in ("all", conversation.part):
                continue
            for question in conversation.questions:
                with override_settings(**UNHURRIED):
                    memory_search(agent=agent, query=question.text, mode=mode)  # caches the query embedding
                for _ in range(rounds):
                    turn += 1
                    for name, values in variants[turn % len(variants):] + variants[:turn % len(variants)]:
                        with override_settings(**{**UNHURRIED, **values}):
                            started = time.perf_counter()
                            memory_search(agent=agent, query=question.text, mode=mode)
                            took[name].append(1000 * (time.perf_counter() - started))
        return {
            name: {"searches": len(ms), "p50_ms": round(percentile(ms, 0.5), 2), "p95_ms": round(percentile(ms, 0.95), 2)}
            for name, ms in took.items()
        }

    def _print_timing(self, timing: dict) -> None:
        for set_name, by_variant in timing.items():
            cells = [f"{name} {t['p50_ms']:.2f} / {t['p95_ms']:.2f} ms" for name, t in by_variant.items()]
            searches = next(iter(by_variant.values()))["searches"]
            self.stdout.write(f"timing {set_name} (p50 / p95, {searches} searches each): {' | '.join(cells)}")

    def _print_variant(self, name: str, values: dict, report: dict, *, seconds: float) -> None:
        cells = []
        for set_name, by_variant in report["sets"].items():
            modes = by_variant[name]["modes_answered"]
            if len(modes) > 1:
                cells.append(f"{set_name} answered {modes}")
            for part, summary in by_variant[name].items():
                if part == "modes_answered":
                    continue
                cell = f"{set_name} {part} {summary['evidence_recall']:.3f}"
                if set_name == "locomo":
                    c = summary["categories"]
                    cell += f" (mh {c['1']['evidence_recall']:.3f} temp {c['2']['evidence_recall']:.3f})"
                cells.append(cell)
        settings_text = ",".join(f"{k.removeprefix(VARIABLE)}={v}" for k, v in values.items()) or "defaults"
        self.stdout.write(f"{name:<14} {' | '.join(cells)}   [{settings_text}; {seconds:.0f} s]")
        self.stdout.flush()
