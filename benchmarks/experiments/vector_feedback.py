"""Experiment (docs/search.md, "Vector feedback: not kept"): the vector half searched a second time with its
query moved toward its own best chunks (pseudo-relevance feedback on the vectors, Rocchio's rule), measured
in the ``bench_variants`` harness and not built into the service.

A variant setting read only here (0 = off, the service's own search):

- ``MEMORYHUB_SEARCH_EXP_VPRF_K=k`` and ``MEMORYHUB_SEARCH_EXP_VPRF_BETA=b``: the vector half finds its
  nearest chunks as the service does; the mean of the ``k`` nearest chunks' vectors, times ``b``, is added to
  each query vector (normalised again), and the half searches again with that. A question whose answer is
  spread over several turns ("What activities does Melanie do?") may find the turns worded like the first
  ones it found rather than like the question.
- ``MEMORYHUB_SEARCH_EXP_VPRF_KEEP=1``: the two searches' hits are merged (each chunk at its better
  distance) instead of the second replacing the first.

    MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 python benchmarks/experiments/vector_feedback.py \\
        --reuse s47 --part all \\
        --variant 'k3b0.5:MEMORYHUB_SEARCH_EXP_VPRF_K=3,MEMORYHUB_SEARCH_EXP_VPRF_BETA=0.5'

Arguments after the script name are bench_variants' own.
"""

import math
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402


def moved(vector: list[float], feedback: list[list[float]], beta: float) -> list[float]:
    """``vector + beta * mean(feedback)``, of unit length (``vector`` itself when there is no feedback)."""
    if not feedback:
        return vector
    size = len(feedback)
    out = [value + beta * sum(row[i] for row in feedback) / size for i, value in enumerate(vector)]
    norm = math.sqrt(sum(value * value for value in out)) or 1.0
    return [value / norm for value in out]


def merged(first: list, second: list, limit: int) -> list:
    """The hits of both searches, each chunk at its smaller distance, nearest first, at most ``limit``."""
    best = {}
    for hit in first + second:
        if hit.chunk_id not in best or hit.distance < best[hit.chunk_id].distance:
            best[hit.chunk_id] = hit
    return sorted(best.values(), key=lambda hit: (hit.distance, hit.chunk_id))[:limit]


def _vectors_of(chunk_ids: list[int], dims: int) -> list[list[float]]:
    from indexing.tables import CHUNK
    from memoryhub.replicas import read_connection

    if not chunk_ids:
        return []
    with read_connection.cursor() as cursor:
        cursor.execute(
            f"SELECT c.embedding::vector({dims})::text FROM {CHUNK} c WHERE c.id = ANY(%s) AND c.embedding IS NOT NULL",
            [chunk_ids],
        )
        return [[float(x) for x in row[0].strip("[]").split(",")] for row in cursor.fetchall()]


def main(argv: list[str]) -> None:
    from django.core.management import call_command

    import search.services as services

    nearest_before = services._nearest

    def nearest(*, agent, vectors, identity, limit, **rest):
        hits = nearest_before(agent=agent, vectors=vectors, identity=identity, limit=limit, **rest)
        k = int(getattr(settings, "MEMORYHUB_SEARCH_EXP_VPRF_K", 0))
        beta = float(getattr(settings, "MEMORYHUB_SEARCH_EXP_VPRF_BETA", 0.0))
        if not k or not beta or not hits:
            return hits
        feedback = _vectors_of([hit.chunk_id for hit in hits[:k]], int(identity.dimensions))
        again = nearest_before(
            agent=agent, vectors=[moved(vector, feedback, beta) for vector in vectors], identity=identity, limit=limit,
            **rest,
        )
        if int(getattr(settings, "MEMORYHUB_SEARCH_EXP_VPRF_KEEP", 0)):
            return merged(hits, again, limit)
        return again

    services._nearest = nearest
    call_command("bench_variants", *argv)


if __name__ == "__main__":
    main(sys.argv[1:])
