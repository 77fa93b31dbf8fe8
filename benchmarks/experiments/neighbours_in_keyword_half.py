"""Measurement (docs/search.md, "Worked-out neighbours searched in the keyword half"): what hybrid
``memory_search`` costs with keyword expansion off, with a small agent's worked-out neighbours searched in
the keyword half's one statement (the default since stop 44), and with them searched by a second keyword
query beside the halves (as before: ``ExpansionPlan.searched`` made to answer None). Only an agent searched
by keyword exactly (at most MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS chunks) differs between the last two:
a larger one sends the second query either way.

It runs on a database that ``bench_scale --keep`` left (fake vectors of its pseudo-words; most words have
a neighbour within a cosine of 0.6, so nearly every question is expanded). For each of its three measured
agents (those with words read), 150 questions of 3-8 of the agent's own words are asked in the three
ways, the order rotating question by question, three rounds of which the first is a warm-up; p50 / p95 in
milliseconds. Run from the checkout:

    .venv/bin/python manage.py bench_scale --chunks 100000 --agents 100 --big 30000 --min-chunks 2000 \\
        --keep --database mh_small
    DB=mh_small .venv/bin/python manage.py shell < benchmarks/experiments/neighbours_in_keyword_half.py
    # afterwards: DROP DATABASE mh_small;
"""

import os
import random
import statistics
import time
from unittest import mock

from django.conf import settings
from django.db import connection

from benchmarks.management.commands.bench_scale import IDENTITY_MODEL, IDENTITY_PROVIDER

connection.close()
connection.settings_dict["NAME"] = os.environ.get("DB", "mh_small")
settings.MEMORYHUB_EMBEDDING_PROVIDER, settings.MEMORYHUB_EMBEDDING_MODEL = IDENTITY_PROVIDER, IDENTITY_MODEL
settings.MEMORYHUB_EMBEDDING_DIMENSIONS = 384  # bench_scale's default --dims

from agents.models import Agent  # noqa: E402  (after the database is chosen)
from search import expansion  # noqa: E402
from search.models import MemoryWord, MemoryWordsState  # noqa: E402
from search.services import memory_search  # noqa: E402

QUESTIONS, ROUNDS = 150, 3

def as_before(plan):  # the neighbours never searched in the keyword half
    return None


VARIANTS = {
    "expansion off": (0.0, expansion.ExpansionPlan.searched),
    "in the keyword half": (0.3, expansion.ExpansionPlan.searched),
    "second query (as before)": (0.3, property(as_before)),
}

print("| agent | memory words | " + " | ".join(VARIANTS) + " |")
print("|---|---|" + "---|" * len(VARIANTS))
for agent_id in MemoryWordsState.objects.order_by("agent_id").values_list("agent_id", flat=True):
    agent = Agent.objects.get(id=agent_id)
    words = list(MemoryWord.objects.filter(agent_id=agent_id).order_by("id").values_list("word", flat=True))
    rng = random.Random(agent_id)
    questions = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 8))) for _ in range(QUESTIONS)]
    took: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for round_ in range(ROUNDS):
        for number, question in enumerate(questions):
            names = list(VARIANTS)
            for name in names[number % len(names):] + names[: number % len(names)]:
                weight, searched = VARIANTS[name]
                settings.MEMORYHUB_SEARCH_EXPANSION_WEIGHT = weight
                with mock.patch.object(expansion.ExpansionPlan, "searched", searched):
                    started = time.perf_counter()
                    memory_search(agent=agent, query=question, mode="hybrid")
                    if round_:
                        took[name].append((time.perf_counter() - started) * 1000)
    cells = [f"{statistics.median(t):.2f} / {sorted(t)[int(len(t) * 0.95)]:.2f} ms" for t in took.values()]
    chunks = agent.chunks.count()
    print(f"| {agent_id} ({chunks:,} chunks) | {len(words):,} | " + " | ".join(cells) + " |", flush=True)
