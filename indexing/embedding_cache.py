"""Embed texts through the cache: each distinct text is embedded once per index identity and agent.

The cache is keyed by (provider, model and its revision, dimensions, whose cache, sha256 of the text); it
stores no text.
Each agent has a cache of its own (MEMORYHUB_EMBEDDING_CACHE_SCOPE=agent): a cache shared by agents
answers "has any agent indexed this text?" to whoever uploads it and reads the job's ``cache_hits`` (or
times it). ``shared`` keeps one cache for every agent. ``embed_texts`` looks every text up, embeds only
the misses (each distinct text once, in batches), stores them and returns one vector per input, in input
order.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from django.conf import settings

from indexing.embeddings import EmbeddingProvider, ProviderInputsRejected, Vector
from indexing.models import EmbeddingCache
from memoryhub import metrics

# Rows per lookup query; keeps the IN (...) list and the result set bounded.
_LOOKUP_BATCH = 1000


def text_hash(text: str) -> str:
    """The sha256 hex digest used for Chunk.text_hash and the cache key."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class EmbedOutcome:
    # One entry per input text. None only for a text the provider rejected (see ``rejected``): store
    # that chunk without a vector; keyword search still finds it.
    vectors: list[Vector | None]
    cache_hits: int  # inputs answered from the cache (repeats of a text in one call count as hits)
    embedded: int  # distinct texts sent to the provider and stored
    rejected: dict[int, str] = field(default_factory=dict)  # input index → the provider's reason


def cache_scope(agent_id: int) -> int:
    """EmbeddingCache.agent_scope of an agent's vectors: its id, or 0 when the cache is shared."""
    return agent_id if settings.MEMORYHUB_EMBEDDING_CACHE_SCOPE == "agent" else 0


def cache_row(*, identity, agent_id: int, digest: str, vector: Vector) -> EmbeddingCache:
    """A new cache row: ``vector`` of the text hashed ``digest``, in this agent's cache."""
    return EmbeddingCache(
        provider=identity.provider, model=identity.model_version, dimensions=identity.dimensions,
        agent_scope=cache_scope(agent_id), text_hash=digest, embedding=vector,
    )


def cached_vectors(*, identity, agent_id: int, digests: list[str]) -> dict[str, Vector]:
    """The vectors of these text hashes in this agent's cache under ``identity`` (no provider call;
    misses are absent)."""
    found: dict[str, Vector] = {}
    cache = EmbeddingCache.objects.filter(
        provider=identity.provider, model=identity.model_version, dimensions=identity.dimensions, agent_scope=cache_scope(agent_id)
    )
    for start in range(0, len(digests), _LOOKUP_BATCH):
        for digest, embedding in cache.filter(text_hash__in=digests[start : start + _LOOKUP_BATCH]).values_list(
            "text_hash", "embedding"
        ):
            found[digest] = list(embedding)
    return found


def embed_texts(*, provider: EmbeddingProvider, agent_id: int, texts: list[str], batch_size: int | None = None) -> EmbedOutcome:
    """Vectors for ``texts`` (this agent's) from its cache, embedding only distinct texts not cached yet.

    Misses are sent in batches of ``batch_size`` (default MEMORYHUB_EMBEDDING_BATCH_SIZE; the provider may
    split further by tokens) and each batch is stored as soon as it returns, so work done before a
    failure is kept. Provider errors propagate, except inputs the provider rejected one by one: those
    get None (listed in ``rejected``) while every other text gets its vector.
    """
    identity = provider.identity
    batch_size = batch_size or settings.MEMORYHUB_EMBEDDING_BATCH_SIZE
    hashes = [text_hash(text) for text in texts]
    distinct = list(dict.fromkeys(hashes))

    found = cached_vectors(identity=identity, agent_id=agent_id, digests=distinct)
    first_text = {}
    for digest, text in zip(hashes, texts):
        first_text.setdefault(digest, text)
    misses = [digest for digest in distinct if digest not in found]
    rejected_hashes: dict[str, str] = {}
    embedded = 0
    for start in range(0, len(misses), batch_size):
        batch = misses[start : start + batch_size]
        try:
            vectors = provider.embed_documents([first_text[digest] for digest in batch])
        except ProviderInputsRejected as exc:
            metrics.embedding_observe(kind="document", inputs=len(batch), error=True)
            vectors = exc.vectors
            rejected_hashes.update({batch[i]: reason for i, reason in exc.rejected.items()})
        except Exception:
            metrics.embedding_observe(kind="document", inputs=len(batch), error=True)
            raise
        else:
            metrics.embedding_observe(kind="document", inputs=len(batch))
        new_rows = []
        for digest, vector in zip(batch, vectors):
            if vector is None:
                continue
            found[digest] = vector
            new_rows.append(cache_row(identity=identity, agent_id=agent_id, digest=digest, vector=vector))
        # Two workers embedding the same new text race harmlessly: the second insert is ignored.
        EmbeddingCache.objects.bulk_create(new_rows, ignore_conflicts=True)
        embedded += len(new_rows)

    hits = len(texts) - sum(1 for digest in hashes if digest in rejected_hashes) - embedded
    rejected = {i: rejected_hashes[digest] for i, digest in enumerate(hashes) if digest in rejected_hashes}
    metrics.embedding_cache_hits(kind="document", hits=hits)
    return EmbedOutcome(
        vectors=[found.get(digest) for digest in hashes], cache_hits=hits, embedded=embedded, rejected=rejected
    )
