"""Experiment (docs/search.md, "Sub-window vectors"): the vector half scored by sub-window vectors.

Not part of the service. It runs ``manage.py bench_variants`` with one extra variant setting,
``MEMORYHUB_SEARCH_SUBWIN=1``, under which the vector half (``search.services._nearest``) is replaced by an
exact numpy search over sub-window vectors: each chunk of the bench_variants agents of ``--reuse TAG`` is
cut into windows of at most ``SUBWIN_TOKENS`` cl100k tokens by the chunker (whole lines, overlap
``SUBWIN_OVERLAP``), each window embedded by the configured provider, and each chunk scored by the best
cosine distance of its windows to any window of the query. ``SUBWIN_WITH_CHUNK=1`` adds the chunk's own
text as one more window. Window vectors are cached in ``SUBWIN_CACHE`` (a pickle, by text digest).

    # index once (a 400/80 index needs the embedder's window lifted, as below; the default index does not)
    MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS=8191 \\
        python manage.py bench_variants --reuse big --part all
    # then, with the same environment
    SUBWIN_TAG=big SUBWIN_TOKENS=220 MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 \\
        MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS=8191 python benchmarks/experiments/subwindow_vectors.py \\
        --reuse big --part all \\
        --variant 'subwin:MEMORYHUB_SEARCH_SUBWIN=1'

Arguments after the script name are bench_variants' own (its default data: both dev files beside the
checkout, or --data FILE). The figures in docs/search.md were measured at commit 7c183ee, before
snippets left a line shown in part free (0c4829a); later code scores a little higher.
"""

import hashlib
import os
import pickle
import sys
import tempfile

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

import search.services as search_services  # noqa: E402
from indexing.chunking import chunk_markdown  # noqa: E402
from indexing.embeddings import get_provider  # noqa: E402
from indexing.models import Chunk  # noqa: E402
from search.vector import VectorHit  # noqa: E402

TAG = os.environ.get("SUBWIN_TAG", "")
WINDOW_TOKENS = int(os.environ.get("SUBWIN_TOKENS", "220"))
OVERLAP_TOKENS = int(os.environ.get("SUBWIN_OVERLAP", "0"))
WITH_CHUNK = bool(os.environ.get("SUBWIN_WITH_CHUNK"))
CACHE = os.environ.get("SUBWIN_CACHE", os.path.join(tempfile.gettempdir(), "memoryhub-subwin-cache.pkl"))


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def windows_embedded() -> dict[int, tuple[list, np.ndarray]]:
    """Per agent: its (chunk id, file id, start, end) per window, and the windows' unit vectors."""
    cache = pickle.load(open(CACHE, "rb")) if os.path.exists(CACHE) else {}
    rows = list(Chunk.objects.filter(agent__slug__startswith=f"variants-{TAG}-").values_list(
        "id", "agent_id", "file_id", "start_line", "end_line", "text"))
    windows = {}
    for chunk_id, _, _, _, _, text in rows:
        parts = [span.text for span in chunk_markdown(text, max_tokens=WINDOW_TOKENS, overlap_tokens=OVERLAP_TOKENS)] or [text]
        if WITH_CHUNK and text not in parts:
            parts.append(text)
        windows[chunk_id] = parts
    todo = list(dict.fromkeys(p for parts in windows.values() for p in parts if digest(p) not in cache))
    print(f"{len(rows)} chunks, {sum(map(len, windows.values()))} windows, {len(todo)} to embed", file=sys.stderr)
    provider = get_provider()
    for start in range(0, len(todo), 256):
        batch = todo[start : start + 256]
        for text, vector in zip(batch, provider.embed_documents(batch)):
            cache[digest(text)] = np.asarray(vector, dtype=np.float32)
    with open(CACHE, "wb") as out:
        pickle.dump(cache, out)
    by_agent: dict[int, list] = {}
    for chunk_id, agent_id, file_id, start_line, end_line, _ in rows:
        for part in windows[chunk_id]:
            vector = cache[digest(part)]
            by_agent.setdefault(agent_id, []).append((chunk_id, file_id, start_line, end_line, vector / np.linalg.norm(vector)))
    return {agent_id: (items, np.stack([item[4] for item in items])) for agent_id, items in by_agent.items()}


def best_window_hits(items: list, matrix: np.ndarray, vectors: list[list[float]], *, limit: int) -> list[VectorHit]:
    """Each chunk at the best cosine distance of any of its windows (``items``: chunk id, file id, start
    line, end line, vector; ``matrix``: their unit vectors as rows) to any window of the query
    (``vectors``), nearest first, at most ``limit``."""
    queries = np.stack([np.asarray(v, dtype=np.float32) / np.linalg.norm(v) for v in vectors])
    distances = 1.0 - (matrix @ queries.T).max(axis=1)
    best: dict[int, VectorHit] = {}
    for (chunk_id, file_id, start_line, end_line, _), distance in zip(items, distances):
        if chunk_id not in best or distance < best[chunk_id].distance:
            best[chunk_id] = VectorHit(chunk_id, float(distance), file_id, start_line, end_line)
    return sorted(best.values(), key=lambda hit: (hit.distance, hit.chunk_id))[:limit]


def main(argv: list[str]) -> None:
    if not TAG:
        sys.exit("set SUBWIN_TAG to the --reuse tag of the bench_variants agents")
    matrices = windows_embedded()
    nearest_before = search_services._nearest

    def nearest(*, agent, vectors, identity, filters, limit, has_index):
        if not getattr(settings, "MEMORYHUB_SEARCH_SUBWIN", 0):
            return nearest_before(agent=agent, vectors=vectors, identity=identity, filters=filters, limit=limit, has_index=has_index)
        items, matrix = matrices[agent.pk]
        return best_window_hits(items, matrix, vectors, limit=limit)

    search_services._nearest = nearest
    call_command("bench_variants", *argv)


if __name__ == "__main__":
    main(sys.argv[1:])
