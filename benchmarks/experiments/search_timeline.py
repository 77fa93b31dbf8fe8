"""Measurement (docs/search.md, "Where a large agent's expansion time goes"): when each step of hybrid
``memory_search`` starts and ends, measured from the search's start, with keyword expansion off and on: the
checks (with keyword expansion's plan; code before stop 45 read the plan in ``expansion_plan`` of its own),
the keyword half (``keyword_candidates``, on a helper), the query embedding, the vector half (``_nearest``),
the second keyword query (``expansion_query``), the lift (``lifted``), the fusion (``fuse``,
``neighbour_credit``) and the snippets (``_results``); inside the keyword half, its first statement
(``_lexemes_and_stats``) and its wait for the plan's neighbours. Each is wrapped where search/services.py
(or search/keyword.py) calls it; the table gives the median start, end and duration of each over the
searches that ran it, and the median search.

It runs on a database that ``bench_scale --keep`` left, as neighbours_in_keyword_half.py does: for each
measured agent, QUESTIONS questions of 3-8 of its own words, each asked with expansion off and on (the
order alternating), three rounds of which the first is a warm-up. Run from the checkout:

    .venv/bin/python manage.py bench_scale --chunks 100000 --agents 100 --big 30000 --min-chunks 2000 \\
        --keep --database mh_small
    DB=mh_small .venv/bin/python manage.py shell < benchmarks/experiments/search_timeline.py
"""

import statistics
import time

from django.conf import settings

from benchmarks.experiments.expansion_variants import bench_scale_database, measured_agents
from search import keyword, services

QUESTIONS, ROUNDS = 80, 3
STEPS = (
    "expansion_plan",  # a statement of its own until stop 45, read with the checks since (not in services then)
    "_search_checks", "keyword_candidates", "_embed_for_search", "_nearest", "expansion_query", "lifted", "fuse",
    "neighbour_credit", "_results",
)

bench_scale_database()
steps: list[tuple[str, float, float]] = []  # (step, start, end) of the search being timed, in ms from its start
search_started = 0.0


def recorded(name: str, real):
    """``real`` wrapped: each call's start and end go to ``steps`` under ``name``."""

    def step(*args, **kwargs):
        started = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:  # list.append is atomic: the helpers' steps are recorded too
            steps.append((name, (started - search_started) * 1000, (time.perf_counter() - search_started) * 1000))

    return step


def timed(name: str, module=services):
    setattr(module, name, recorded(name, getattr(module, name)))


for name in STEPS:
    if hasattr(services, name):
        timed(name)
# Inside the keyword half: its first statement (the question's lexemes, the keyword stats) and, for an agent
# searched exactly, its wait for the plan's neighbours ("the plan wait": the call of its ``also``).
timed("_lexemes_and_stats", module=keyword)
keyword_half = services.keyword_candidates


def keyword_candidates(*args, also=None, **kwargs):
    if also is not None:
        also = recorded("the plan wait", also)
    return keyword_half(*args, also=also, **kwargs)


services.keyword_candidates = keyword_candidates

for agent, words, questions in measured_agents(QUESTIONS):
    searches = {0.0: [], 0.3: []}  # expansion weight → the searches' total times
    spans = {0.0: {}, 0.3: {}}  # expansion weight → step → [(start, end)]
    for round_ in range(ROUNDS):
        for number, question in enumerate(questions):
            for weight in (0.0, 0.3) if number % 2 else (0.3, 0.0):
                settings.MEMORYHUB_SEARCH_EXPANSION_WEIGHT = weight
                steps.clear()
                search_started = time.perf_counter()
                services.memory_search(agent=agent, query=question, mode="hybrid")
                if round_:
                    searches[weight].append((time.perf_counter() - search_started) * 1000)
                    for name, start, end in steps:
                        spans[weight].setdefault(name, []).append((start, end))
    print(f"\nagent {agent.id} ({agent.chunks.count():,} chunks, {len(words):,} memory words)")
    print("| expansion | step | searches | start | end | duration (ms, medians) |")
    print("|---|---|---|---|---|---|")
    for weight in (0.0, 0.3):
        label = "off" if weight == 0 else "on"
        print(f"| {label} | the search | {len(searches[weight])} | 0 | {statistics.median(searches[weight]):.2f} | |")
        for name, timings in sorted(spans[weight].items(), key=lambda item: statistics.median(s for s, _ in item[1])):
            print(f"| {label} | {name} | {len(timings)} | {statistics.median(s for s, _ in timings):.2f} "
                  f"| {statistics.median(e for _, e in timings):.2f} | {statistics.median(e - s for s, e in timings):.2f} |")
