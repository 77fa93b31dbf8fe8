"""Measurement (docs/search.md, "Worked-out neighbours searched in the keyword half"): keyword expansion's
lift with raw BM25 instead of scaled scores. Today a chunk's keyword score is its question BM25 scaled so
the best is 1, plus MEMORYHUB_SEARCH_EXPANSION_WEIGHT times its BM25 for the neighbours scaled the same
way (search/expansion.py's ``lifted``). The raw form adds WEIGHT times the neighbours' BM25 to the
question's BM25, then scales: one BM25 with the neighbours as terms at a lower weight, which the large
agents' bounded keyword search could prune (its bounds are per term), so that their neighbours too could
be searched in the keyword half's statement. Here every expansion goes through a second query (the
neighbours are never searched in the keyword half) and ``lifted`` is replaced by the raw form; the
variants are run by ``bench_variants`` on the agents of a ``--reuse TAG`` run, its "default" row being the
raw form at the default weight. Run from the checkout:

    MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 MEMORYHUB_SEARCH_QUERY_CACHE_SIZE=1000000 TAG=s44 \\
        .venv/bin/python manage.py shell < benchmarks/experiments/expansion_raw_weight.py
"""

import os
from unittest import mock

from django.core.management import call_command

from search import expansion, services
from search.keyword import KeywordHit, KeywordResult


def raw_lifted(first: KeywordResult, second: KeywordResult, *, weight: float) -> KeywordResult:
    scores = {hit.chunk_id: hit.bm25 for hit in first.hits}
    added = {hit.chunk_id: weight * hit.bm25 for hit in second.hits}
    where = {hit.chunk_id: hit for hit in [*second.hits, *first.hits]}
    for chunk_id, extra in added.items():
        scores[chunk_id] = scores.get(chunk_id, 0.0) + extra
    best = max(scores.values(), default=1.0) or 1.0
    hits = [
        KeywordHit(
            chunk_id=chunk_id, score=score / best, bm25=score, file_id=where[chunk_id].file_id,
            start_line=where[chunk_id].start_line, end_line=where[chunk_id].end_line,
            expansion_score=added[chunk_id] / best if chunk_id in added else None,
        )
        for chunk_id, score in sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    ]
    return KeywordResult(hits=hits, lexemes=first.lexemes, idf=first.idf, exact=first.exact, expansion=second.expansion)


with mock.patch.object(services, "lifted", raw_lifted), mock.patch.object(expansion.ExpansionPlan, "searched", None):
    call_command(
        "bench_variants", "--reuse", os.environ.get("TAG", "s44"), "--part", "all",
        "--variant", "raw15:MEMORYHUB_SEARCH_EXPANSION_WEIGHT=0.15", "--variant", "raw50:MEMORYHUB_SEARCH_EXPANSION_WEIGHT=0.5",
    )
