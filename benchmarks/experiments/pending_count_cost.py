"""What counting an agent's files (only when some wait for their vectors) costs a search that waits for none:
the search's first statement (search/services.py ``_search_checks``) timed with ``_PENDING_SQL`` as it is and
with the count left out, alternately, on an agent of a ``bench_variants --reuse TAG`` run (docs/search.md,
"While a quarter of the files wait for their vectors").

    TAG=s49 MEMORYHUB_EMBEDDING_PROVIDER=local python manage.py shell < benchmarks/experiments/pending_count_cost.py
"""

import os
import statistics
import time

import search.services as services
from agents.models import Agent
from indexing.embedding_identity import configured_identity
from search.deadline import SearchDeadline

WITH_COUNT = services._PENDING_SQL
WITHOUT_COUNT = (
    f"SELECT count(*), count(*) FILTER (WHERE indexed_hash = content_hash), NULL::bigint FROM {services.FILE} "
    "WHERE agent_id = %(agent)s AND state = ANY(%(states)s)"
)
agent = Agent.objects.get(slug=f"variants-{os.environ.get('TAG', 's49')}-locomo-0")
identity = configured_identity()


def median_ms(sql: str, searches: int = 300) -> float:
    services._PENDING_SQL = sql
    took = []
    for _ in range(searches):
        started = time.perf_counter()
        with SearchDeadline() as deadline:
            services._search_checks(agent=agent, identity=identity, want_vectors=True, deadline=deadline)
        took.append((time.perf_counter() - started) * 1000)
    return statistics.median(took)


try:
    median_ms(WITH_COUNT, 50), median_ms(WITHOUT_COUNT, 50)  # warm both plans' caches
    for round_number in range(4):
        print(f"round {round_number}: with the count {median_ms(WITH_COUNT):.3f} ms, without {median_ms(WITHOUT_COUNT):.3f} ms")
finally:
    services._PENDING_SQL = WITH_COUNT
