"""`manage.py bench_scale` end to end on a tiny corpus: it builds its own database (COPY into the real
tables, the index tasks' code, VACUUM), measures, and drops it. A schema change that breaks its COPY
(a new NOT NULL column without a database default did) fails here rather than in a manual run."""

import gc
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection

# bench_scale sets these for its synthetic identity; they are put back after the run.
TOUCHED = (
    "MEMORYHUB_EMBEDDING_PROVIDER", "MEMORYHUB_EMBEDDING_MODEL", "MEMORYHUB_EMBEDDING_DIMENSIONS",
    "MEMORYHUB_VECTOR_HNSW_MIN_CHUNKS",
)


@pytest.mark.django_db(transaction=True)
def test_bench_scale_builds_measures_and_drops_its_database():
    saved = {name: getattr(settings, name) for name in TOUCHED}
    out = StringIO()
    try:
        call_command(
            "bench_scale", chunks=3000, agents=5, big=1500, dims=16, queries=6, min_chunks=500,
            keyword_budgets="100,2000", database="test_memoryhub_bench_scale_smoke", stdout=out,
        )
    finally:
        for name, value in saved.items():
            setattr(settings, name, value)
        gc.unfreeze()
    report = out.getvalue()
    assert "load (COPY): " in report and "VACUUM (ANALYZE)" in report
    assert "| big (1,500 chunks, hnsw) | 1.000 |" in report  # recall@10 against exact search
    assert "memory_search hybrid" in report
    assert "| budget 2,000 (default) | 1.000 |" in report  # 1,500 chunks: every word fits, so exact BM25
    assert "dropped database test_memoryhub_bench_scale_smoke" in report
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_database WHERE datname = 'test_memoryhub_bench_scale_smoke'")
        assert cursor.fetchone()[0] == 0
