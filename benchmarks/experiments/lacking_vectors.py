"""Experiment (docs/search.md, "A chunk waiting for its vector is scored by its keywords alone"): while a
share of an agent's chunks have no vector yet, each of them that only the keyword half found is scored by its
keyword half alone, as if its vector had scored what its keywords did. Measured with mixed_index.py's shares
of chunks without a vector (``--absent``).

A variant setting read only here (0 = off):

- ``MEMORYHUB_SEARCH_EXP_LACKING=1``: after fusion, every candidate the vector half did not return and that
  has no vector of the configured identity gets its keyword score (0..1, scaled to the best keyword hit) as
  its fused score, instead of the keyword half's share of it. Candidates with a vector keep their scores.

    MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 python benchmarks/experiments/lacking_vectors.py \\
        --stale 0.1,0.25,0.5,0.75 --absent -- --reuse s49 --part all --only locomo --only meetings \\
        --variant 'lacking:MEMORYHUB_SEARCH_EXP_LACKING=1'

The service now does this itself (search/fusion.py ``keyword_scored_without_vectors``), but only while some
of the agent's files wait for their vectors (``status.awaiting_vectors``); the shares here take the vectors
off chunks and leave every file ``indexed``, so the service's own form does not fire in this harness, and
the defaults show the hybrid search as it was before it.
"""

import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402


def main(argv: list[str]) -> None:
    import search.fusion as fusion
    import search.services as services
    from benchmarks.experiments import mixed_index
    from indexing.embedding_identity import configured_identity
    from indexing.models import Chunk

    fuse_before = services.fuse

    def fuse(**arguments):
        candidates = fuse_before(**arguments)
        if not int(getattr(settings, "MEMORYHUB_SEARCH_EXP_LACKING", 0)) or not arguments.get("vector"):
            return candidates
        only_keyword = [c.chunk_id for c in candidates if fusion.keyword_only(c)]
        lacking = set(
            Chunk.objects.filter(id__in=only_keyword)
            .exclude(embedding_identity=configured_identity().key, embedding__isnull=False)
            .values_list("id", flat=True)
        )
        return fusion.keyword_scored_without_vectors(candidates, lacking)

    services.fuse = fuse
    mixed_index.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
