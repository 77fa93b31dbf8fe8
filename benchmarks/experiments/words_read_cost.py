"""Measurement (docs/search.md, "Words refused by the cap are read again after a drop"): what reading an
agent's words costs with the words already stored left out of the room (``_WORDS_STORE_SQL`` now) against
the statement of before, and what reading them again after a drop costs at worst. On a database that
``bench_scale --keep`` left, for each measured agent:

- its words read from scratch (``_words_read`` over all its chunks: words, lexemes and state deleted
  first), with each statement, alternately ROUNDS times;
- then ``_words_refill`` at its worst: the agent full but for ten places and no word refused anywhere, so
  that every chunk is read and nothing found.

    .venv/bin/python manage.py bench_scale --chunks 100000 --agents 100 --big 30000 --min-chunks 2000 \\
        --keep --database mh_small
    DB=mh_small .venv/bin/python manage.py shell < benchmarks/experiments/words_read_cost.py

The measured agents' words are read again by the last round, with this code's statement, but not
embedded: build the database again before timing searches with expansion on it.
"""

import math
import re
import time

from django.conf import settings
from django.db import connection

import search.expansion as expansion
from benchmarks.experiments.expansion_variants import bench_scale_database
from indexing.tables import CHUNK
from search.models import MemoryLexeme, MemoryWord, MemoryWordsState

ROUNDS = 3
NOW = expansion._WORDS_STORE_SQL
BEFORE = re.sub(r"\n    WHERE NOT EXISTS \(SELECT 1 FROM \S+ s WHERE s\.agent_id = %\(agent\)s AND s\.word = q\.w\)", "", NOW)
assert BEFORE != NOW, "the statement of before could not be made from this one"


def read_all(agent_id: int, statement: str) -> tuple[float, int]:
    """Seconds to read the agent's words from scratch with ``statement``, and the words stored."""
    MemoryWord.objects.filter(agent_id=agent_id).delete()
    MemoryLexeme.objects.filter(agent_id=agent_id).delete()
    MemoryWordsState.objects.filter(agent_id=agent_id).delete()
    expansion._WORDS_STORE_SQL = statement
    try:
        started = time.perf_counter()
        expansion._words_read(
            agent_id=agent_id, after=0, words=0, lexemes=0, deadline=math.inf, outcome=expansion.WordsOutcome()
        )
        return time.perf_counter() - started, MemoryWord.objects.filter(agent_id=agent_id).count()
    finally:
        expansion._WORDS_STORE_SQL = NOW


bench_scale_database()
agent_ids = list(MemoryWordsState.objects.order_by("agent_id").values_list("agent_id", flat=True))
print("| agent | words | read from scratch, now | before | reading again at worst |")
print("|---|---|---|---|---|")
for agent_id in agent_ids:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {CHUNK} WHERE agent_id = %s", [agent_id])
        chunks = cursor.fetchone()[0]
    took: dict[str, list[str]] = {"now": [], "before": []}
    for round_ in range(ROUNDS):
        for name, statement in (("before", BEFORE), ("now", NOW)) if round_ % 2 else (("now", NOW), ("before", BEFORE)):
            seconds, _ = read_all(agent_id, statement)
            took[name].append(f"{seconds:.2f}")
    _, words = read_all(agent_id, NOW)
    settings.MEMORYHUB_SEARCH_EXPANSION_MAX_WORDS = words + 10
    started = time.perf_counter()
    expansion._words_refill(agent_id=agent_id, deadline=math.inf, outcome=expansion.WordsOutcome())
    refill = time.perf_counter() - started
    print(f"| {agent_id} ({chunks:,} chunks) | {words:,} | {', '.join(took['now'])} s | {', '.join(took['before'])} s "
          f"| {refill:.2f} s |")
