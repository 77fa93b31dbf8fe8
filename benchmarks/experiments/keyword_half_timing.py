"""Measurement (docs/search.md, "A small agent's size read with its question's lexemes"): the keyword half
alone (``keyword_candidates``, no expansion) for each measured agent of a database that ``bench_scale
--keep`` left: the statements one search sends and its median time over QUESTIONS questions of 3-8 of the
agent's own words, ROUNDS rounds of which the first is a warm-up. Run from the checkout, and from a
worktree of the code to compare with, alternating:

    .venv/bin/python manage.py bench_scale --chunks 100000 --agents 100 --big 30000 --min-chunks 2000 \\
        --keep --database mh_small
    DB=mh_small .venv/bin/python manage.py shell < benchmarks/experiments/keyword_half_timing.py
"""

import statistics
import time

from django.db import connection
from django.test.utils import CaptureQueriesContext

from benchmarks.experiments.expansion_variants import bench_scale_database, measured_agents
from search.keyword import keyword_candidates
from search.types import SearchFilters

QUESTIONS, ROUNDS = 80, 4

bench_scale_database()
print("| agent | statements per search | keyword half p50 |")
print("|---|---|---|")
for agent, _words, questions in measured_agents(QUESTIONS):
    with CaptureQueriesContext(connection) as captured:
        keyword_candidates(agent_id=agent.pk, query=questions[0], filters=SearchFilters(), limit=100)
    took = []
    for round_ in range(ROUNDS):
        for question in questions:
            started = time.perf_counter()
            keyword_candidates(agent_id=agent.pk, query=question, filters=SearchFilters(), limit=100)
            if round_:
                took.append((time.perf_counter() - started) * 1000)
    print(f"| {agent.id} ({agent.chunks.count():,} chunks) | {len(captured.captured_queries)} | {statistics.median(took):.3f} ms |")
