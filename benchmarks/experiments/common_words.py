"""Experiment (docs/search.md, "A dense query without the memory's common words: not kept"): the vector
half also searches with the question stripped of the words most of the memory's chunks hold, measured in
the ``bench_variants`` harness and not built into the service.

MiniLM's vector of "What activities does Melanie partake in?" leans on the name, which stands in nearly
every chunk of Melanie's conversation, so the chunks nearest to it are those most about Melanie, not
those naming an activity. Here a question of one window is also embedded without the words that stand
in at least ``t`` of the agent's chunks (its speakers, in a transcript), and the vector half uses both.
Variant settings, read only here:

- ``MEMORYHUB_SEARCH_EXP_COMMON_DF=t`` (0 = off): the share of the agent's chunks a word must stand in
  to be left out.
- ``MEMORYHUB_SEARCH_EXP_COMMON_NAMES=1``: only capitalised words are left out (names and roles; "what"
  and "the" stay).
- ``MEMORYHUB_SEARCH_EXP_COMMON_MODE``: ``max`` (default: each chunk at its best distance to either
  vector, as for a query of several windows), ``sum`` (one vector, the two added and normalised) or
  ``only`` (the stripped question alone).

    MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 python benchmarks/experiments/common_words.py \\
        --reuse s40 --part tune --variant 'df0.3:MEMORYHUB_SEARCH_EXP_COMMON_DF=0.3'

Arguments after the script name are bench_variants' own.
"""

import math
import os
import re
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402

WORD = re.compile(r"[A-Za-z0-9']+")


def word_shares(texts: list[str], *, word_pattern: re.Pattern = WORD) -> dict[str, float]:
    """Each lower-cased word (a match of ``word_pattern``): the share of ``texts`` it stands in."""
    counts: dict[str, int] = {}
    for text in texts:
        for word in {w.lower() for w in word_pattern.findall(text)}:
            counts[word] = counts.get(word, 0) + 1
    return {word: n / len(texts) for word, n in counts.items()} if texts else {}


def stripped(query: str, shares: dict[str, float], *, threshold: float, names_only: bool) -> str:
    """``query`` without its words standing in at least ``threshold`` of the chunks (only the capitalised
    ones with ``names_only``); the other characters are kept as they are."""

    def keep(match: re.Match) -> str:
        word = match.group(0)
        common = shares.get(word.lower(), 0.0) >= threshold
        return "" if common and (word[0].isupper() or not names_only) else word

    return re.sub(r"\s+", " ", WORD.sub(keep, query)).strip()


def combined(first: list[float], second: list[float]) -> list[float]:
    total = [a + b for a, b in zip(first, second)]
    norm = math.sqrt(sum(v * v for v in total)) or 1.0
    return [v / norm for v in total]


def main(argv: list[str]) -> None:
    from django.core.management import call_command

    import search.services as services
    from indexing.embeddings import get_provider
    from indexing.models import Chunk

    embed_before = services._embed_for_search
    shares_of: dict[int, dict[str, float]] = {}

    def embed_for_search(*, identity, agent_id, query, has_vectors, deadline):
        vectors, why = embed_before(identity=identity, agent_id=agent_id, query=query, has_vectors=has_vectors, deadline=deadline)
        threshold = float(getattr(settings, "MEMORYHUB_SEARCH_EXP_COMMON_DF", 0))
        if not threshold or vectors is None or len(vectors) != 1:
            return vectors, why
        if agent_id not in shares_of:
            shares_of[agent_id] = word_shares(list(Chunk.objects.filter(agent_id=agent_id).values_list("text", flat=True)))
        names_only = bool(int(getattr(settings, "MEMORYHUB_SEARCH_EXP_COMMON_NAMES", 0)))
        text = stripped(query, shares_of[agent_id], threshold=threshold, names_only=names_only)
        if not text or text == query:
            return vectors, why
        other = services.query_embedding(provider=get_provider(), text=text, agent_id=agent_id, timeout=60)[0]
        mode = getattr(settings, "MEMORYHUB_SEARCH_EXP_COMMON_MODE", "max")
        if mode == "only":
            return [other], why
        if mode == "sum":
            return [combined(vectors[0], other)], why
        return [vectors[0], other], why

    services._embed_for_search = embed_for_search
    call_command("bench_variants", *argv)


if __name__ == "__main__":
    main(sys.argv[1:])
