"""Measurement (docs/search.md, "Each word's neighbours worked out ahead"): what hybrid ``memory_search``
costs with keyword expansion off, with each memory word's neighbours worked out ahead (the default since
stop 43: ``MemoryWord.neighbours``), and with them looked up at every search (as before: the lists are
made unreadable by giving the plan another settings key, so ``expansion_plan`` finds none).

It runs on a database that ``bench_scale --keep`` left (fake vectors of its pseudo-words; most words have
a neighbour within a cosine of 0.6, so nearly every question runs the second keyword query). For each of
its three measured agents (those with words read), 150 questions of 3-8 of the agent's own words are
asked in the three ways (benchmarks/experiments/expansion_variants.py). Run from the checkout:

    .venv/bin/python manage.py bench_scale --chunks 100000 --agents 100 --big 30000 --min-chunks 2000 \\
        --keep --database mh_small
    DB=mh_small .venv/bin/python manage.py shell < benchmarks/experiments/neighbours_ahead.py
    # afterwards: DROP DATABASE mh_small;
"""

from unittest import mock

from benchmarks.experiments.expansion_variants import bench_scale_database, timed_variants
from search import expansion

bench_scale_database()

worked_out = expansion.neighbours_key


def keyed(key):
    return lambda: mock.patch.object(expansion, "neighbours_key", key)


timed_variants({
    "expansion off": (0.0, keyed(worked_out)),
    "neighbours worked out ahead": (0.3, keyed(worked_out)),
    "neighbours looked up": (0.3, keyed(lambda key: "not " + worked_out(key))),
})
