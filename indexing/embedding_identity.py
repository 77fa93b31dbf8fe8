"""The index identity: which provider, model and dimension produced a vector.

Vectors of different identities never meet in one search; a change of identity is detected by
comparing each chunk's `embedding_identity` with the configured one. The revision
(MEMORYHUB_EMBEDDING_REVISION, empty by default) is the operator's name for a model changed behind the
same name (indexing/model_check.py finds one): a new revision is a new identity, so every chunk is
embedded again and no vector of the old model is taken from the embedding cache.
"""

from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class EmbeddingIdentity:
    provider: str
    model: str
    dimensions: int | None
    revision: str = ""

    @property
    def model_version(self) -> str:
        """The model and its revision, as the embedding cache and the batches record what made a vector:
        "all-MiniLM-L6-v2", or "my-embedder@2" once MEMORYHUB_EMBEDDING_REVISION is 2. Requests to the
        provider name the model alone (``model``)."""
        return f"{self.model}@{self.revision}" if self.revision else self.model

    @property
    def key(self) -> str:
        return f"{self.provider}:{self.model_version}:{self.dimensions}" if self.dimensions else ""

    @property
    def has_vectors(self) -> bool:
        return self.provider != "none" and bool(self.dimensions)


def provider_chosen() -> str:
    """"auto" when MEMORYHUB_EMBEDDING_PROVIDER=auto (or unset) picked the provider at start, else "setting"."""
    return getattr(settings, "MEMORYHUB_EMBEDDING_PROVIDER_CHOSEN", "setting")


def configured_identity() -> EmbeddingIdentity:
    return EmbeddingIdentity(
        provider=settings.MEMORYHUB_EMBEDDING_PROVIDER,
        model=settings.MEMORYHUB_EMBEDDING_MODEL,
        dimensions=settings.MEMORYHUB_EMBEDDING_DIMENSIONS if settings.MEMORYHUB_EMBEDDING_PROVIDER != "none" else None,
        revision=settings.MEMORYHUB_EMBEDDING_REVISION,
    )
