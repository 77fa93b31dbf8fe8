"""The index identity: which provider, model and dimension produced a vector.

Vectors of different identities never meet in one search; a change of identity is detected by
comparing each chunk's `embedding_identity` with the configured one.
"""

from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class EmbeddingIdentity:
    provider: str
    model: str
    dimensions: int | None

    @property
    def key(self) -> str:
        return f"{self.provider}:{self.model}:{self.dimensions}" if self.dimensions else ""

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
    )
