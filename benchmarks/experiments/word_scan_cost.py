"""Experiment (docs/search.md, "Keyword expansion by words of like meaning"): what the nearest-word lookup
of that expansion would cost in Postgres, as an exact scan of one agent's word vectors.

A temporary table (gone with the session) holds three agents of 2,000, 20,000 and 100,000 random
384-dimension vectors with an index on the agent; each lookup is ``ORDER BY embedding <=> q LIMIT 3``
for one agent, seven random queries per size, and the median is printed. Run in the configured
database (the embedded one by default):

    .venv/bin/python manage.py shell < benchmarks/experiments/word_scan_cost.py
"""

import random
import statistics
import time

from django.db import connection

SIZES = {1: 2000, 2: 20000, 3: 100000}  # agent id in the temporary table -> its words
QUERIES = 7

with connection.cursor() as cursor:
    cursor.execute("CREATE TEMP TABLE word_scan (agent_id int, word text, embedding vector(384))")
    for agent, count in SIZES.items():
        cursor.execute(
            "INSERT INTO word_scan SELECT %s, 'w' || g, (SELECT array_agg(random() - 0.5)::vector(384) "
            "FROM generate_series(1, 384) WHERE g > 0) FROM generate_series(1, %s) g",
            [agent, count],
        )
    cursor.execute("CREATE INDEX ON word_scan (agent_id)")
    cursor.execute("ANALYZE word_scan")
    for agent, count in SIZES.items():
        took = []
        for _ in range(QUERIES):
            query = "[" + ",".join(f"{random.random() - 0.5:.4f}" for _ in range(384)) + "]"
            started = time.perf_counter()
            cursor.execute(
                "SELECT word, 1 - (embedding <=> %s::vector) FROM word_scan WHERE agent_id = %s "
                "ORDER BY embedding <=> %s::vector LIMIT 3",
                [query, agent, query],
            )
            cursor.fetchall()
            took.append((time.perf_counter() - started) * 1000)
        print(f"{count} words: exact nearest-3 scan median {statistics.median(took):.1f} ms ({QUERIES} queries)")
    cursor.execute("DROP TABLE word_scan")
