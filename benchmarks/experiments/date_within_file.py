"""Experiment (docs/search.md): a question's named date finds the file; within that file, the date's words
do not pick the chunk. Measured in the ``bench_variants`` harness.

"What new activity did Maria start recently, as mentioned on 3 June, 2023?" is answered by line 14 of the
session written on 3 June, 2023, whose title line says so. The date stage (search/dates.py) favours that
file, and inside it the keyword half ranks first the chunk that holds the title line: its date's words
("3", "june", "2023") are the question's words that chunk matches, while the answering turn, in another
chunk of the same file, matches only "Maria". The snippet then sits on the title line.

A variant setting read only here (0 = off, the service's own search):

- ``MEMORYHUB_SEARCH_EXP_DATE_WITHIN=1``: a question naming a date runs its keyword half twice, with the
  question and with the date expressions taken out. A chunk of a file written in the named span (the date
  stage's own rule) gets the BM25 of the second run (or no keyword score when only the date's words
  matched it); every other chunk keeps that of the first (a turn that names the date in its text is found
  by it). The scores are scaled to the best again.
- ``MEMORYHUB_SEARCH_EXP_DATE_WITHIN=2``: as 1, and a chunk of another file gets the second run's BM25 too
  (the date's words out of the keyword half for every chunk once a file matched).

    MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 python benchmarks/experiments/date_within_file.py \\
        --reuse s49 --part all --variant 'within:MEMORYHUB_SEARCH_EXP_DATE_WITHIN=1'

Arguments after the script name are bench_variants' own.
"""

import os
import sys
from dataclasses import replace
from datetime import datetime, timezone

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402


def without_dates(query: str) -> str:
    """``query`` lower-cased, with every date expression search/dates.py reads taken out."""
    from search.dates import _FORMS, relative_spans

    text = query.lower()
    _, text = relative_spans(text, today=datetime.now(timezone.utc).date())
    for _, pattern in _FORMS:
        text = pattern.sub(" ", text)
    return " ".join(text.split())


def combined(first, second, *, matched_files: set[int], every: bool, limit: int):
    """The keyword result whose hits in ``matched_files`` (every hit, with ``every``) are the second run's,
    the others the first's, scaled to the best BM25 again."""
    chosen = {}
    for hit in first.hits:
        if not every and hit.file_id not in matched_files:
            chosen[hit.chunk_id] = hit
    for hit in second.hits:
        if every or hit.file_id in matched_files:
            chosen[hit.chunk_id] = hit
    hits = sorted(chosen.values(), key=lambda hit: (-hit.bm25, hit.chunk_id))[:limit]
    best = hits[0].bm25 if hits and hits[0].bm25 > 0 else 1.0
    scaled = [
        replace(hit, score=hit.bm25 / best,
                expansion_score=None if hit.expansion_score is None else hit.expansion_score * (hit.bm25 / best) / hit.score
                if hit.score else None)
        for hit in hits
    ]
    return replace(first, hits=scaled, idf={**second.idf, **first.idf})


def main(argv: list[str]) -> None:
    from django.core.management import call_command

    import search.services as services
    from search.dates import in_spans, query_spans

    keyword_before = services.keyword_candidates

    def keyword_candidates(*, agent_id, query, limit, **rest):
        first = keyword_before(agent_id=agent_id, query=query, limit=limit, **rest)
        mode = int(getattr(settings, "MEMORYHUB_SEARCH_EXP_DATE_WITHIN", 0))
        asked = query_spans(query, today=datetime.now(timezone.utc).date()) if mode else []
        if not asked or not first.hits:
            return first
        stripped = without_dates(query)
        if not stripped:
            return first
        second = keyword_before(agent_id=agent_id, query=stripped, limit=limit, **rest)
        days = services._file_days(agent_id=agent_id, file_ids={hit.file_id for hit in [*first.hits, *second.hits]})
        after = settings.MEMORYHUB_SEARCH_DATE_AFTER_DAYS
        matched = {file_id for file_id, day in days.items() if in_spans(day, asked, after_days=after)}
        if not matched:
            return first
        return combined(first, second, matched_files=matched, every=mode == 2, limit=limit)

    services.keyword_candidates = keyword_candidates
    call_command("bench_variants", *argv)


if __name__ == "__main__":
    main(sys.argv[1:])
