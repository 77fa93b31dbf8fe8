"""The optional rerank stage (off unless MEMORYHUB_RERANK_URL is set).

After fusion and the ``min_score`` filter, the best ``MEMORYHUB_RERANK_TOP_N`` candidates' texts go to a
``/rerank`` endpoint with the query; the answer's relevance scores reorder those candidates, before
snippets are built. The common shape, which Cohere (``/v2/rerank``), Jina (``/v1/rerank``), Voyage
(``/v1/rerank``) and Hugging Face TEI (``/rerank``) serve:

    request   {"model", "query", "documents": [text, ...], "top_n"}     (TEI: "texts", no model)
    answer    {"results": [{"index", "relevance_score"}, ...]}  (Voyage: "data"; TEI: a list of {"index", "score"})

``score`` stays the fusion's score (its 0..1 scale and ``min_score`` keep their meaning); the order is
the reranker's, and ``explain`` shows each reranked result's ``rerank_rank`` and ``rerank_score``.
The call has its own timeout (MEMORYHUB_RERANK_TIMEOUT, and never past the search's deadline); when it
fails, the search answers in the unreranked order and its ``message`` says so.
"""

from __future__ import annotations

import json
import logging
import math
import socket
import urllib.error
import urllib.request

from django.conf import settings

from search.fusion import Candidate

logger = logging.getLogger(__name__)

# Reranking models read a few hundred tokens of each document; chunks are at most MEMORYHUB_CHUNK_TOKENS.
DOCUMENT_CHARS = 4000


class RerankFailed(Exception):
    """The rerank endpoint did not give a usable answer in time."""


def rerank_enabled() -> bool:
    return bool(settings.MEMORYHUB_RERANK_URL)


def rerank_scores(*, query: str, documents: list[str], timeout: float) -> list[float]:
    """One relevance score per document, in document order; RerankFailed otherwise."""
    model = settings.MEMORYHUB_RERANK_MODEL
    documents = [text[:DOCUMENT_CHARS] or " " for text in documents]
    body: dict = {"query": query}
    if model:
        body.update(model=model, documents=documents, top_n=len(documents))
    else:  # Hugging Face TEI serves one model and reads "texts"
        body["texts"] = documents
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if settings.MEMORYHUB_RERANK_API_KEY:
        headers["Authorization"] = f"Bearer {settings.MEMORYHUB_RERANK_API_KEY}"
    request = urllib.request.Request(
        settings.MEMORYHUB_RERANK_URL, data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise RerankFailed(f"HTTP {exc.code} from the rerank endpoint") from None
    except (TimeoutError, socket.timeout):
        raise RerankFailed(f"the rerank endpoint did not answer within {timeout:.1f} s") from None
    except (urllib.error.URLError, OSError) as exc:
        raise RerankFailed(f"cannot reach the rerank endpoint: {getattr(exc, 'reason', exc)}") from None
    except ValueError:
        raise RerankFailed("malformed answer from the rerank endpoint") from None
    return _scores_of(answer, len(documents))


def _scores_of(answer, count: int) -> list[float]:
    items = answer
    if isinstance(answer, dict):
        items = answer.get("results", answer.get("data"))
    scores: list[float | None] = [None] * count
    try:
        for item in items:
            index = int(item["index"])
            score = float(item["relevance_score"] if "relevance_score" in item else item["score"])
            if not 0 <= index < count or not math.isfinite(score):
                raise ValueError(item)
            scores[index] = score
    except (TypeError, KeyError, ValueError):
        raise RerankFailed("malformed answer from the rerank endpoint") from None
    if any(score is None for score in scores):
        raise RerankFailed(f"the rerank endpoint scored {sum(s is not None for s in scores)} of {count} documents")
    return scores  # type: ignore[return-value]


def candidates_reranked(
    *, query: str, candidates: list[Candidate], texts: dict[int, str], timeout: float
) -> tuple[list[Candidate], str]:
    """The candidates with the top ``MEMORYHUB_RERANK_TOP_N`` in the reranker's order (the rest after
    them, as they were), and a note for the search's message ("" when it worked)."""
    top = [c for c in candidates[: settings.MEMORYHUB_RERANK_TOP_N] if c.chunk_id in texts]
    if len(top) < 2:
        return candidates, ""
    try:
        scores = rerank_scores(query=query, documents=[texts[c.chunk_id] for c in top], timeout=timeout)
    except RerankFailed as exc:
        logger.warning("rerank failed: %s", exc)
        return candidates, f"Reranking failed ({exc}): the results are in the unreranked order."
    order = sorted(range(len(top)), key=lambda i: -scores[i])  # stable: ties keep the fusion's order
    for rank, i in enumerate(order, 1):
        top[i].rerank_rank, top[i].rerank_score = rank, scores[i]
    reranked = {c.chunk_id for c in top}
    return [top[i] for i in order] + [c for c in candidates if c.chunk_id not in reranked], ""
