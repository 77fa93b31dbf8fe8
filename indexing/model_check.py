"""Whether the model behind the configured name still gives the index's vectors: a few chunks' texts are
embedded again and compared with the vectors stored for them.

A vector is comparable only with vectors of the same model. The index identity (provider, model name,
dimensions, revision: indexing/embedding_identity.py) names the model that made each vector, but a name
can stay while the model behind it changes: an OpenAI-compatible server redeployed with another model
under the same served name, an Ollama tag moved to a new build. Nothing fails then. Queries are embedded
by the new model and compared with the old model's vectors, and the vector half of every search ranks
by noise; new files' vectors, and the embedding cache's answers for old texts, mix the two models.

**The check** (every MEMORYHUB_EMBEDDING_CHECK_INTERVAL seconds on the worker, or `manage.py
embedding_model_check`) picks up to SAMPLE_FILES indexed files at random places in the file table, and of
each the first chunk that holds a vector of the configured identity. The first chunk of a file starts
at its first line, so what was embedded for it is its text alone (a later chunk may have had the file's
title in front: indexing/services.py chunk_indexed_text); a chunk whose text does not give its
``text_hash`` is left out, and so is one longer than MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS (the provider
would cut it now; it was sent whole when indexed, chunks being never longer than the window then), so
the model reads exactly what it read before. The texts go in one request, and each new vector is
compared with the stored one. The same model gives the same vector (to within 1e-6 in the checks
SAME_MODEL cites); a stored vector whose similarity is below SAME_MODEL was made by a model other than
the one answering now.

The outcome is stored per identity and endpoint (EmbeddingModelCheck, listed in the admin for
superusers) and shown in every agent's ``status`` (``embedding.model_check``); a change is logged as an
error at each check until it is resolved. When the last comparison found at least PAUSE_SHARE of the
chunks it compared embedded by another model (``vectors_paused``), searches leave the vector half out and
answer by keywords, saying why: a query embedded by one model, compared with another model's vectors,
ranks by noise. A mixed index (vectors written since the change match the new model) does worse than one
all of whose vectors are stale: the new vectors stand above the old ones whatever they say, so the vector
half pushes up the files written since the change. Measured with a share of the dev sets' vectors
replaced by another model's (docs/providers.md): from about a quarter, the hybrid search finds less than
keyword search alone.

The remedy is the operator's: set MEMORYHUB_EMBEDDING_REVISION to a new value and restart. The identity
is new then, so maintenance embeds every chunk again and the cache answers nothing from the old model.
The check does not do that itself: embedding a whole index again costs what indexing it did, and the
operator may prefer to put the old model back.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError
from django.db.models import Max, Min
from django.utils import timezone

from indexing.embedding_cache import text_hash
from indexing.embedding_identity import configured_identity
from indexing.embeddings import ProviderError, ProviderInputsRejected, get_provider, provider_base_url
from indexing.models import Chunk, EmbeddingModelCheck, MemoryFile
from indexing.window_probe import cosine, tried_once

logger = logging.getLogger(__name__)

# Files sampled per check: one request of at most this many chunks (each within the model's window).
SAMPLE_FILES = 8
# Cosine similarity at or above which a stored vector is the model's own. The same model gave 1 to
# within 1e-6: the tests' server, and all-MiniLM-L6-v2 with a text embedded alone and in a batch of 8
# (1 - 3e-13, 2026-11-28). Another model gave about 0 (the fake provider's vectors against MiniLM's:
# -0.03, docs/providers.md). The margin leaves room for a provider whose vectors move a little from call
# to call; how far a quantised copy of the same weights moves was not measured.
SAME_MODEL = 0.95

# The share of the compared chunks whose vectors another model made from which searches leave the vector
# half out (2 of SAMPLE_FILES). With that share of the dev sets' vectors from another model, the hybrid
# search found about what keyword search alone finds (LoCoMo 0.804 / 0.783 against 0.800 / 0.808, the
# meetings 0.416 / 0.418 against 0.422 / 0.395), and less beyond it (at half: 0.761 / 0.727 and 0.390 /
# 0.367): benchmarks/experiments/mixed_index.py, docs/providers.md.
PAUSE_SHARE = 0.25

# A process reads the last check again after this many seconds (searches ask it for every query).
PAUSE_RECHECK_SECONDS = 60.0

_paused: dict[tuple[str, str], tuple[str | None, float]] = {}  # (identity, endpoint) -> (why, read at)
_paused_lock = threading.Lock()

@dataclass
class ModelCheckOutcome:
    state: str  # "same", "changed", "unchecked" (nothing to compare), "failed" (the provider did not answer)
    compared: int = 0
    differed: int = 0
    lowest_similarity: float | None = None
    error: str = ""


def model_check(provider=None) -> ModelCheckOutcome:
    """Check the configured model against the index now, and store the outcome (module docstring)."""
    identity = configured_identity()
    provider = provider or get_provider()
    if provider is None or provider.identity != identity:
        return ModelCheckOutcome(state="unchecked")
    sample = _sample(identity.key)
    if not sample:
        return _store(ModelCheckOutcome(state="unchecked"))
    texts = [text for text, _ in sample]
    try:
        vectors = list(tried_once(provider).embed_documents(texts))
    except ProviderInputsRejected as exc:
        vectors = list(exc.vectors)
    except ProviderError as exc:
        logger.warning("could not check the embedding model %s: %s", identity.key, exc)
        return _store(ModelCheckOutcome(state="failed", error=str(exc)[:500]))
    similarities = [cosine(new, stored) for new, (_, stored) in zip(vectors, sample) if new is not None]
    if not similarities:
        return _store(ModelCheckOutcome(state="unchecked"))
    differed = sum(1 for similarity in similarities if similarity < SAME_MODEL)
    outcome = ModelCheckOutcome(
        state="changed" if differed else "same", compared=len(similarities), differed=differed,
        lowest_similarity=min(similarities),
    )
    if differed:
        logger.error(
            "the embedding model %s no longer gives the index's vectors: %d of %d chunks checked were embedded by "
            "another model (lowest cosine similarity %.3f). If the model behind the name changed, set "
            "MEMORYHUB_EMBEDDING_REVISION to a new value and restart: every chunk is embedded again.",
            identity.key, differed, len(similarities), outcome.lowest_similarity,
        )
    return _store(outcome)


def model_check_state() -> dict:
    """The last check of the configured identity, for ``status``: its state and when it ran."""
    identity = configured_identity()
    rows = EmbeddingModelCheck.objects.filter(identity=identity.key, endpoint=_endpoint())
    row = identity.has_vectors and rows.first()
    if not row:
        return {"state": "unchecked", "checked_at": None, "changed_since": None}
    return {"state": row.state, "checked_at": row.checked_at, "changed_since": row.changed_since}


def vectors_paused(identity) -> str | None:
    """Why searches should leave the vector half out, or None: the last check of ``identity`` found at least
    PAUSE_SHARE of the chunks it compared embedded by another model. Read from the database at most every
    PAUSE_RECHECK_SECONDS per process; a database that does not answer pauses nothing (the search's own
    queries meet that error anyway)."""
    key = (identity.key, _endpoint())
    with _paused_lock:
        cached = _paused.get(key)
    if cached is not None and time.monotonic() - cached[1] < PAUSE_RECHECK_SECONDS:
        return cached[0]
    try:
        row = EmbeddingModelCheck.objects.filter(identity=key[0], endpoint=key[1]).first()
    except DatabaseError:
        row = None  # asked again after PAUSE_RECHECK_SECONDS, not at every search
    _remember(key, row)
    return _paused_reason(row)


def model_check_cache_clear() -> None:
    """Forget the checks this process read (tests)."""
    with _paused_lock:
        _paused.clear()


def _paused_reason(row) -> str | None:
    if row is None or not row.compared or row.differed < PAUSE_SHARE * row.compared:
        return None
    return (
        f"The embedding model behind {row.identity} no longer gives the index's vectors ({row.differed} of "
        f"{row.compared} chunks checked, found {row.changed_since:%Y-%m-%d %H:%M} UTC): vector search waits until the "
        "index is embedded again."
    )


def _remember(key: tuple[str, str], row) -> None:
    with _paused_lock:
        _paused[key] = (_paused_reason(row), time.monotonic())


def _sample(identity_key: str) -> list[tuple[str, list[float]]]:
    """(embedded text, stored vector) of the first vector chunk of up to SAMPLE_FILES files at random
    places of the file table (an index scan each, whatever the table's size)."""
    span = MemoryFile.objects.aggregate(low=Min("id"), high=Max("id"))
    if span["low"] is None:
        return []
    indexed = MemoryFile.objects.filter(indexed_at__isnull=False).order_by("id").values_list("agent_id", "id")
    chunks = Chunk.objects.filter(
        embedding_identity=identity_key, embedding__isnull=False,
        token_count__lte=settings.MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS,
    ).order_by("ordinal").values_list("text", "text_hash", "embedding")
    sample: dict[tuple[int, int], tuple[str, list[float]]] = {}
    for start in sorted(random.randint(span["low"], span["high"]) for _ in range(SAMPLE_FILES)):
        found = indexed.filter(id__gte=start).first()
        if found is None or found in sample:
            continue
        chunk = chunks.filter(agent_id=found[0], file_id=found[1]).first()
        if chunk is not None and text_hash(chunk[0]) == chunk[1]:  # else a title was embedded in front: left out
            sample[found] = (chunk[0], list(chunk[2]))
    return list(sample.values())


def _store(outcome: ModelCheckOutcome) -> ModelCheckOutcome:
    """Write the outcome on the identity's row. A check that could not compare keeps the last comparison
    (and a change it found) and records why."""
    now = timezone.now()
    row, _ = EmbeddingModelCheck.objects.get_or_create(identity=configured_identity().key, endpoint=_endpoint())
    row.checked_at, row.error = now, outcome.error
    if outcome.state in ("same", "changed"):
        row.compared, row.differed, row.lowest_similarity = outcome.compared, outcome.differed, outcome.lowest_similarity
        row.changed_since = (row.changed_since or now) if outcome.differed else None
    row.save()
    _remember((row.identity, row.endpoint), row)  # this process's searches follow at once
    return outcome


def _endpoint() -> str:
    return provider_base_url(settings.MEMORYHUB_EMBEDDING_PROVIDER)

