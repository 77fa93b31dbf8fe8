"""`manage.py bench_scale` end to end on a tiny corpus: it builds its own database (COPY into the real
tables, the index tasks' code, VACUUM), measures, and drops it. A schema change that breaks its COPY
(a new NOT NULL column without a database default did) fails here rather than in a manual run."""

import gc
import re
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection

from search.keyword import SCORE_BUDGET

# bench_scale sets these for its synthetic identity; they are put back after the run.
TOUCHED = (
    "MEMORYHUB_EMBEDDING_PROVIDER", "MEMORYHUB_EMBEDDING_MODEL", "MEMORYHUB_EMBEDDING_DIMENSIONS",
    "MEMORYHUB_VECTOR_HNSW_MIN_CHUNKS",
)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("partitions", [8, 0], ids=["partitioned", "one-table"])
def test_bench_scale_builds_measures_and_drops_its_database(partitions):
    saved = {
        name: getattr(settings, name)
        for name in TOUCHED + ("MEMORYHUB_CHUNK_PARTITIONS", "MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS")
    }
    settings.MEMORYHUB_CHUNK_PARTITIONS = partitions  # read by the throw-away database's migration
    # The big agent large enough for keyword stats, as at full scale: the exact baseline searches it
    # without them.
    settings.MEMORYHUB_SEARCH_KEYWORD_EXACT_MAX_CHUNKS = 1000
    out = StringIO()
    try:
        call_command(
            "bench_scale", chunks=3000, agents=5, big=1500, dims=16, queries=6, min_chunks=500,
            keyword_budgets=f"30,{SCORE_BUDGET}", catalog=3, database="test_memoryhub_bench_scale_smoke", stdout=out,
        )
    finally:
        for name, value in saved.items():
            setattr(settings, name, value)
        gc.unfreeze()
    report = out.getvalue()
    assert "load (COPY): " in report and "VACUUM (ANALYZE)" in report
    assert "| big (1,500 chunks, hnsw) | 1.000 |" in report  # recall@10 against exact search
    assert "memory_search hybrid" in report
    # hybrid against the sum of its halves, and the same search over HTTP (a non-200 answer fails the run)
    overhead = next(line for line in report.splitlines() if line.startswith("| big (1,500 chunks, hnsw) |") and "×" in line)
    assert overhead.count("×**") == 2 and "ms |" in overhead
    assert "POST /api/v1/search p50 / p95" in report
    # the two passes find the exact BM25 top 10 (plain and tie-aware overlap alike)
    default = f"| budget {SCORE_BUDGET:,} (default) |"
    assert f"{default} 1.000 | 1.000 |" in report
    # bm25s over the same lexemes ranks as the exact BM25 does up to ties (the yardstick computes the same
    # ranking), and each budget's time is given against it
    bm25s_row = next(line for line in report.splitlines() if line.startswith("| bm25s "))
    assert bm25s_row.split("|")[3].strip() == "1.000"
    assert f"{default} 1.000 | 1.000 | 1.00 |" in report  # and proven so
    budget_row = next(line for line in report.splitlines() if line.startswith(default))
    assert float(budget_row.rstrip(" |").rsplit("|", 1)[1]) > 0
    # catalog mode: 3 more agents' GIN + HNSW indexes, the big agent measured with and without them
    assert "catalog: 6 more partial indexes (3 agents x GIN + HNSW)" in report
    assert (f"chunk table: {partitions} partitions by agent" if partitions else "chunk table: one table") in report
    assert "database size: " in report
    counts = re.search(r"\| big agent \| (\d+) indexes on the chunk table \| (\d+) indexes \|", report)
    assert int(counts[2]) == int(counts[1]) + 6 and int(counts[1]) >= 5  # the shared indexes and the run's own
    assert "| hybrid memory_search, p50 / p95 |" in report and "| COPY of 7,000 chunk rows (one new agent) |" in report
    assert "dropped database test_memoryhub_bench_scale_smoke" in report
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_database WHERE datname = 'test_memoryhub_bench_scale_smoke'")
        assert cursor.fetchone()[0] == 0


def test_tie_aware_overlap_counts_a_result_tied_with_the_tenth_exact_score():
    from benchmarks.management.commands.bench_scale import ExactTop

    # Exact ranking: chunks 1..9 score 9..1, then chunks 10, 11 and 12 tie at 0.5; 13 scores 0.25.
    scores = {**{i: float(10 - i) for i in range(1, 10)}, 10: 0.5, 11: 0.5, 12: 0.5, 13: 0.25}
    exact = ExactTop(top10=list(range(1, 11)), scores=scores, tenth=0.5, truncated=False)
    assert exact.tie_aware_overlap([*range(1, 10), 12]) == 1.0  # 12 ties with 10: a plain overlap counts 0.9
    assert exact.tie_aware_overlap([*range(1, 10), 13]) == 0.9  # 13 scores below the 10th
    assert exact.tie_aware_overlap([*range(1, 10), 99]) == 0.9  # not among the exact scores read: below them
    assert ExactTop(top10=[1, 2], scores={1: 2.0, 2: 2.0, 3: 2.0}, tenth=2.0, truncated=True).tie_aware_overlap([3, 4]) == 1.0


@pytest.mark.django_db(transaction=True)
def test_bench_scale_build_probe_times_one_agents_index_builds_as_the_table_grows():
    saved = {name: getattr(settings, name) for name in TOUCHED}
    out = StringIO()
    try:
        call_command(
            "bench_scale", dims=16, build_probe="1500,4000", probe_chunks=300,
            database="test_memoryhub_bench_scale_probe", stdout=out,
        )
    finally:
        for name, value in saved.items():
            setattr(settings, name, value)
    report = out.getvalue()
    rows = [line for line in report.splitlines() if line.startswith("| 1,500 rows |") or line.startswith("| 4,000 rows |")]
    assert len(rows) == 2
    # Partitioned by agent: each build reads the probe agent's partition, a small part of the table.
    partition_rows = [int(row.split("|")[2].split("(")[0].replace(",", "")) for row in rows]
    assert all(300 <= n < 4000 for n in partition_rows) and "indexing_chunk_p" in rows[1]
    assert "ratio 4,000 / 1,500 rows: GIN " in report
    assert "dropped database test_memoryhub_bench_scale_probe" in report
