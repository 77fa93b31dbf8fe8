"""Measurement (docs/search.md, "Keyword expansion before either half"): what the per-agent HNSW indexes
of the memory's words (search/expansion.py, ``words_indexes_sync``) cost the planner of every statement
on that table, as agents with enough words add theirs: on one table the planner weighs every agent's
partial index; partitioned by agent (search/migrations/0006), only those on the agent's partition.

For 0, 250, 1,000 and 2,000 indexes (empty partial HNSW indexes of agent ids no agent has, each on the
partition that id falls in, as ``words_indexes_sync`` builds them: the planner weighs an index's
predicate whatever its size), it times the planning of the search's two statements on
that table for one agent of a ``bench_variants --reuse TAG`` run: ``expansion_plan``'s and the
nearest-word lookup's (EXPLAIN (SUMMARY), the median of 20 plannings). The indexes are dropped at the
end. Run from the checkout:

    TAG=s42 .venv/bin/python manage.py shell < benchmarks/experiments/word_index_planning.py
"""

import os
import statistics

from django.db import connection

from agents.models import Agent
from indexing.embedding_identity import configured_identity
from indexing.keyword_document import KEYWORD_CONFIG
from indexing.partitions import agent_table
from search import expansion

TAG = os.environ.get("TAG", "s42")
COUNTS = (0, 250, 1000, 2000)
ROUNDS = 20

agent = Agent.objects.get(slug=f"variants-{TAG}-meetings-0")
identity = configured_identity()
words = ["budget", "design", "remote", "buttons"]
nearest_sql = expansion._NEAREST_SQL.format(
    dims=identity.dimensions, words=expansion.WORDS, agent=agent.pk, identity=expansion._sql_string(identity.key)
)
statements = {
    "expansion_plan": (
        expansion._PLAN_SQL,
        {"words": words, "config": KEYWORD_CONFIG, "agent": agent.pk, "identity": identity.key, "key": expansion.neighbours_key(identity.key)},
    ),
    "nearest words": (nearest_sql, [words, [None] * len(words), 11]),
}


def planning_ms(sql, params) -> float:
    times = []
    with connection.cursor() as cursor:
        for _ in range(ROUNDS):
            cursor.execute("EXPLAIN (SUMMARY) " + sql, params)
            line = [row[0] for row in cursor.fetchall() if row[0].startswith("Planning Time")][0]
            times.append(float(line.split(":")[1].split()[0]))
    return statistics.median(times)


made = 0
try:
    for count in COUNTS:
        with connection.cursor() as cursor:
            while made < count:
                made += 1
                cursor.execute(
                    f'CREATE INDEX "word_hnsw_planning_{made}" ON {agent_table(table=expansion.WORDS, agent_id=-made)} '
                    f"USING hnsw ((embedding::vector({identity.dimensions})) vector_cosine_ops) "
                    f"WHERE agent_id = {-made} AND embedding_identity = {expansion._sql_string(identity.key)}"
                )
        figures = ", ".join(f"{name} {planning_ms(*statement):.2f} ms" for name, statement in statements.items())
        print(f"{count:5d} word indexes: planning {figures}")
finally:
    with connection.cursor() as cursor:
        for number in range(1, made + 1):
            cursor.execute(f'DROP INDEX IF EXISTS "word_hnsw_planning_{number}"')
