"""A query longer than the embedding model's window, read whole by the vector half.

A model reads at most MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS (all-MiniLM-L6-v2: 256 word pieces, 220
cl100k tokens): a longer query — a pasted stretch of dialogue, a paragraph of context — was embedded
from its first sentences only, and the rest of it counted for nothing in the vector half. So a long
query is cut into windows the model reads whole (the chunker's windows: whole lines, a long line in
pieces, no overlap), each window is embedded (one batched call where the provider can), and the vector
half searches with every window and keeps each chunk's best distance: a memory close to any part of
the dialogue is found. A query that fits in one window is embedded as it is (one call, as before).

Measured on the dialogue-shaped dev set (docs/search.md): the mean of the windows' vectors lost to the
first window alone (dense recall 0.40 against 0.49: a centroid of a whole conversation is close to
nothing in particular); the best window per chunk won (0.53).
"""

from __future__ import annotations

from indexing.chunking import chunk_markdown
from indexing.window_probe import model_window

# A 10,000-character query is ~12 windows of 220 tokens; each costs an embedding and a vector query.
MAX_QUERY_WINDOWS = 8


def query_windows(text: str, *, max_tokens: int, limit: int = MAX_QUERY_WINDOWS) -> list[str]:
    """``text`` cut into at most ``limit`` windows of at most ``max_tokens`` tokens, in order (the
    first ``limit`` of them); ``[text]`` when it fits in one window."""
    if "\n" not in text and len(text.encode()) <= max_tokens:
        return [text]  # one line of no more bytes than the window has tokens (a token is a byte or more)
    windows = [span.text for span in chunk_markdown(text, max_tokens=max_tokens, overlap_tokens=0)]
    if len(windows) <= 1:
        return [text]
    return windows[:limit]


def query_text_windows(text: str) -> list[str]:
    """The windows of a query for the configured model's window (MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS, or
    the model's measured window: indexing/window_probe.py)."""
    return query_windows(text, max_tokens=model_window())


def query_vectors(*, provider, windows: list[str], words: list[str] = ()) -> list[list[float]]:
    """The provider's vector of each window of a query (see the module docstring), then of each of
    ``words`` (keyword expansion's: search/expansion.py)."""
    return provider.embed_query_and_words(list(windows), list(words))
