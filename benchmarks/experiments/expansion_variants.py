"""The measurement neighbours_ahead.py and neighbours_in_keyword_half.py share: hybrid ``memory_search``
timed under a few keyword-expansion variants, on a database that ``bench_scale --keep`` left (its fake
vectors and identity). For each of its measured agents (those with words read), 150 questions of 3-8 of
the agent's own words are asked under every variant, the order rotating question by question, three
rounds of which the first is a warm-up; one table row per agent, p50 / p95 in milliseconds."""

import os
import random
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

from django.conf import settings
from django.db import connection

from agents.models import Agent
from benchmarks.management.commands.bench_scale import IDENTITY_MODEL, IDENTITY_PROVIDER
from search.models import MemoryWord, MemoryWordsState
from search.services import memory_search

QUESTIONS, ROUNDS = 150, 3


def bench_scale_database() -> None:
    """Search the database named by $DB (default mh_small) with bench_scale's embedding identity."""
    connection.close()
    connection.settings_dict["NAME"] = os.environ.get("DB", "mh_small")
    settings.MEMORYHUB_EMBEDDING_PROVIDER, settings.MEMORYHUB_EMBEDDING_MODEL = IDENTITY_PROVIDER, IDENTITY_MODEL
    settings.MEMORYHUB_EMBEDDING_DIMENSIONS = 384  # bench_scale's default --dims


def measured_agents(count: int = QUESTIONS) -> Iterator[tuple[Agent, list[str], list[str]]]:
    """(agent, its memory words, ``count`` questions of 3-8 of them) for each agent with words read."""
    for agent_id in MemoryWordsState.objects.order_by("agent_id").values_list("agent_id", flat=True):
        words = list(MemoryWord.objects.filter(agent_id=agent_id).order_by("id").values_list("word", flat=True))
        rng = random.Random(agent_id)
        questions = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 8))) for _ in range(count)]
        yield Agent.objects.get(id=agent_id), words, questions


def timed_variants(variants: dict[str, tuple[float, Callable[[], AbstractContextManager]]]) -> None:
    """Print the table: each variant is (MEMORYHUB_SEARCH_EXPANSION_WEIGHT, a context each search runs in)."""
    print("| agent | memory words | " + " | ".join(variants) + " |")
    print("|---|---|" + "---|" * len(variants))
    for agent, words, questions in measured_agents():
        took: dict[str, list[float]] = {name: [] for name in variants}
        for round_ in range(ROUNDS):
            for number, question in enumerate(questions):
                names = list(variants)
                for name in names[number % len(names):] + names[: number % len(names)]:
                    weight, context = variants[name]
                    settings.MEMORYHUB_SEARCH_EXPANSION_WEIGHT = weight
                    with context():
                        started = time.perf_counter()
                        memory_search(agent=agent, query=question, mode="hybrid")
                        if round_:
                            took[name].append((time.perf_counter() - started) * 1000)
        cells = [f"{statistics.median(t):.2f} / {sorted(t)[int(len(t) * 0.95)]:.2f} ms" for t in took.values()]
        chunks = agent.chunks.count()
        print(f"| {agent.id} ({chunks:,} chunks) | {len(words):,} | " + " | ".join(cells) + " |", flush=True)
