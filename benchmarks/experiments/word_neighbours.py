"""Experiment (docs/search.md, "Keyword expansion by words of like meaning"): the keyword half also
searches for the memory's own words nearest in meaning to the question's words, measured in the
``bench_variants`` harness and not built into the service.

The keyword half finds only the words a question shares with its evidence. A multi-hop question asks
for "activities" where the turns say "hiking" and "pottery"; a meeting's question says "budget" where
the transcript says "cost". Here every word of the agent's chunks is embedded once (the service's
provider, one word per input), and each content word of a short question (not a stop word, not
capitalised past its first word) brings the ``k`` words of the memory whose cosine to it is at least
``t`` (not the word itself nor one sharing its first five letters). Those words are searched as a
second keyword query, and each chunk's keyword score becomes its own plus ``λ`` times its score there,
scaled so the best is 1 again. Variant settings, read only here:

- ``MEMORYHUB_SEARCH_EXP_NEIGHBOURS=λ`` (0 = off);
- ``MEMORYHUB_SEARCH_EXP_NEIGHBOURS_MIN=t`` (default 0.6) and ``MEMORYHUB_SEARCH_EXP_NEIGHBOURS_K=k``
  (default 3);
- ``MEMORYHUB_SEARCH_EXP_NEIGHBOURS_MAX_SHARE=s`` (default 1, every word): only the question's words that
  stand in at most a share ``s`` of the agent's chunks are expanded (0: only words the memory lacks);
- ``MEMORYHUB_SEARCH_EXP_NEIGHBOURS_MIN_IDF=x`` (default 0, every word): the same gate read off the
  keyword half instead, as the service could: only words a lexeme of which has a BM25 IDF of at least
  ``x`` in the agent, or stands in none of its chunks (3.8 is a share of about 2 %).

The service now expands by default (search/expansion.py, MEMORYHUB_SEARCH_EXPANSION_WEIGHT=0.3): to
measure this experiment's forms, turn the service's off in the environment
(``MEMORYHUB_SEARCH_EXPANSION_WEIGHT=0``), as the figures of docs/search.md's "stop 40" section were made.

The vocabularies are embedded before the questions (each distinct word once for all agents), so no
search waits for them.

    MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 python benchmarks/experiments/word_neighbours.py \\
        --reuse s40 --part tune --variant 'wn0.3:MEMORYHUB_SEARCH_EXP_NEIGHBOURS=0.3'

Arguments after the script name are bench_variants' own. With ``--daily-notes`` first, the questions
are asked of daily notes instead (daily_notes_check.py's set, indexed by that script under the same
``--reuse`` tag first).
"""

import math
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402
from django.conf import settings  # noqa: E402

from benchmarks.experiments.common_words import word_shares  # noqa: E402
from search import expansion  # noqa: E402

MAX_QUESTION_WORDS = 30
# The service's word form, stop words and question words (search/expansion.py, built from this experiment).
WORD, STOP = expansion.WORD, expansion.STOP
content_words = expansion.content_words


def vocabulary(texts: list[str]) -> dict[str, float]:
    """The words of ``texts`` worth a vector (three letters or more, not stop words), each with the share
    of ``texts`` it stands in."""
    shares = word_shares(texts, word_pattern=WORD)
    return {word: shares[word] for word in sorted(shares) if len(word) >= 3 and word not in STOP}


def neighbours(word: str, vector, words: list[str], matrix, *, at_least: float, k: int) -> list[str]:
    """The ``k`` words of ``words`` (rows of ``matrix``, unit vectors) nearest to ``vector`` with a cosine
    of at least ``at_least``, leaving out ``word`` and the words sharing its first five letters."""
    if not words:
        return []
    cosines = matrix @ np.asarray(vector)
    out = []
    for index in np.argsort(-cosines):
        if cosines[index] < at_least or len(out) == k:
            break
        other = words[index]
        if other != word and other[:5] != word[:5]:
            out.append(other)
    return out


def lifted(first, second, *, weight: float):
    """The keyword hits of ``first`` with ``weight`` times their score in ``second`` added, scaled so the
    best scores 1: the service's merge (search/expansion.py)."""
    return expansion.lifted(first, second, weight=weight)


def main(argv: list[str], *, daily_notes: bool = False) -> None:
    from django.core.management import call_command

    import search.services as services
    from agents.models import Agent
    from indexing.embeddings import get_provider
    from indexing.models import Chunk
    from search.keyword import query_lexemes

    provider = get_provider()
    vectors: dict[str, np.ndarray] = {}

    def embedded(words: list[str]) -> None:
        missing = [w for w in words if w not in vectors]
        for start in range(0, len(missing), 512):
            batch = missing[start:start + 512]
            for word, vector in zip(batch, provider.embed_documents(batch)):
                vector = np.asarray(vector, dtype=np.float32)
                vectors[word] = vector / (np.linalg.norm(vector) or 1.0)

    tag = argv[argv.index("--reuse") + 1] if "--reuse" in argv else ""
    vocabularies: dict[int, tuple[list[str], np.ndarray, dict[str, float]]] = {}
    for agent in Agent.objects.filter(slug__startswith=f"variants-{tag}-"):
        shares = vocabulary(list(Chunk.objects.filter(agent_id=agent.pk).values_list("text", flat=True)))
        words = list(shares)
        embedded(words)
        vocabularies[agent.pk] = (words, np.stack([vectors[w] for w in words]) if words else np.zeros((0, 1)), shares)
    print(f"word_neighbours: {len(vectors)} words embedded for {len(vocabularies)} agents", file=sys.stderr)

    keyword_before = services.keyword_candidates

    def keyword_candidates(*, agent_id, query, filters, limit):
        first = keyword_before(agent_id=agent_id, query=query, filters=filters, limit=limit)
        weight = float(getattr(settings, "MEMORYHUB_SEARCH_EXP_NEIGHBOURS", 0))
        words = content_words(query)
        if not weight or agent_id not in vocabularies or not words or len(query.split()) > MAX_QUESTION_WORDS:
            return first
        vocab, matrix, shares = vocabularies[agent_id]
        max_share = float(getattr(settings, "MEMORYHUB_SEARCH_EXP_NEIGHBOURS_MAX_SHARE", 1))
        words = [w for w in words if shares.get(w, 0.0) <= max_share]
        min_idf = float(getattr(settings, "MEMORYHUB_SEARCH_EXP_NEIGHBOURS_MIN_IDF", 0))
        if min_idf:
            words = [w for w in words if any(first.idf.get(x, math.inf) >= min_idf for x in query_lexemes(w))]
        embedded(words)
        at_least = float(getattr(settings, "MEMORYHUB_SEARCH_EXP_NEIGHBOURS_MIN", 0.6))
        k = int(getattr(settings, "MEMORYHUB_SEARCH_EXP_NEIGHBOURS_K", 3))
        extra = [n for w in words for n in neighbours(w, vectors[w], vocab, matrix, at_least=at_least, k=k)]
        if not extra:
            return first
        second = keyword_before(agent_id=agent_id, query=" ".join(dict.fromkeys(extra)), filters=filters, limit=limit)
        return lifted(first, second, weight=weight)

    services.keyword_candidates = keyword_candidates
    if daily_notes:
        from benchmarks.experiments.daily_notes_check import daily_notes_load
        from benchmarks.experiments.derived import bench_variants_on_locomo
        from benchmarks.locomo import CATEGORIES

        bench_variants_on_locomo(argv, name="locomo", categories=CATEGORIES, load=daily_notes_load)
    else:
        call_command("bench_variants", *argv)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    main([a for a in arguments if a != "--daily-notes"], daily_notes="--daily-notes" in arguments)
