"""Measurement (docs/search.md, "Worked-out neighbours searched in the keyword half"): what hybrid
``memory_search`` costs with keyword expansion off, with a small agent's worked-out neighbours searched in
the keyword half's one statement (the default since stop 44), and with them searched by a second keyword
query beside the halves (as before: ``ExpansionPlan.searched`` made to answer None). Only an agent searched
by keyword exactly (at most MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS chunks) differs between the last two:
a larger one sends the second query either way.

It runs on a database that ``bench_scale --keep`` left (fake vectors of its pseudo-words; most words have
a neighbour within a cosine of 0.6, so nearly every question is expanded). For each of its three measured
agents (those with words read), 150 questions of 3-8 of the agent's own words are asked in the three
ways (benchmarks/experiments/expansion_variants.py). Run from the checkout:

    .venv/bin/python manage.py bench_scale --chunks 100000 --agents 100 --big 30000 --min-chunks 2000 \\
        --keep --database mh_small
    DB=mh_small .venv/bin/python manage.py shell < benchmarks/experiments/neighbours_in_keyword_half.py
    # afterwards: DROP DATABASE mh_small;
"""

from unittest import mock

from benchmarks.experiments.expansion_variants import bench_scale_database, timed_variants
from search import expansion

bench_scale_database()


def as_before(plan):  # the neighbours never searched in the keyword half
    return None


def searched(answer):
    return lambda: mock.patch.object(expansion.ExpansionPlan, "searched", answer)


timed_variants({
    "expansion off": (0.0, searched(expansion.ExpansionPlan.searched)),
    "in the keyword half": (0.3, searched(expansion.ExpansionPlan.searched)),
    "second query (as before)": (0.3, searched(property(as_before))),
})
