"""Experiment (docs/search.md, "Centred queries, speakers' lines, diversity for every query, chunk overlap:
not kept", and the section named below): three ways to reorder the candidates, measured in the
``bench_variants`` harness and not built into the service.

Each is a variant setting read only here (0 = off, the service's own search):

- ``MEMORYHUB_SEARCH_EXP_CENTER=a``: the vector half searches with the query vector minus ``a`` times the
  mean of the agent's chunk vectors (normalised again), so that what all of one memory's chunks share
  (its speakers, its register) weighs less than what the query asks.
- ``MEMORYHUB_SEARCH_EXP_SPEAKER=w``: a query that names a speaker of the memory ("What did Melanie
  paint?", "What did the professor think about clustering?") is answered by that speaker's lines. Each of
  the 50 best candidates is scored × (1 - w × (1 - share)), ``share`` the part of its query-word weight
  (IDF) that stands in lines of a named speaker (without words: the part of its lines they speak).
- ``MEMORYHUB_SEARCH_EXP_FILE_SPREAD=f`` (docs/search.md, "The defaults swept again with keyword
  expansion, and a file spread for list questions"): each candidate's score × ``f`` to the power of the
  number of better candidates of its file, so that the answer spreads over files; only for a question
  asking for a list ("What books has John read?", "Which cities ...": ``list_question``) unless
  ``MEMORYHUB_SEARCH_EXP_FILE_SPREAD_ALL=1``.

The speaker and file-spread stages run before the service's own steps on the fused candidates
(``min_score``, the long queries' spread, the rerank stage, snippets), by wrapping
``search.services._results``; the centring wraps ``_nearest``:

    MEMORYHUB_EMBEDDING_PROVIDER=local HF_HUB_OFFLINE=1 python benchmarks/experiments/candidate_stages.py \\
        --reuse s34 --part all \\
        --variant 'center0.5:MEMORYHUB_SEARCH_EXP_CENTER=0.5' --variant 'speaker0.4:MEMORYHUB_SEARCH_EXP_SPEAKER=0.4'

Arguments after the script name are bench_variants' own; ``--list-recall DIR/default.jsonl`` instead
counts the list questions among LoCoMo's multi-hop ones in a ``--details`` file and gives the recall of
each kind. The other rows of the same section need no script: diversity for every query is the service's
``MEMORYHUB_SEARCH_DIVERSITY_MIN_LEXEMES=1``, and
the chunk-overlap rows are ``bench_variants`` runs with ``MEMORYHUB_CHUNK_TOKENS`` /
``MEMORYHUB_CHUNK_OVERLAP`` set for the whole command and a tag of their own (the index is built with
them).
"""

import json
import math
import os
import re
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402

LIST_QUESTION = re.compile(r"^\s*(?:what|which)\s+(?:(?:kinds?|types?|sorts?) of\s+)?([a-z]+)\b", re.IGNORECASE)
NOT_PLURAL = frozenset({"is", "was", "does", "has", "happens"})
SPEAKER_LINE = re.compile(r"^([A-Z][^:\n]{0,39}):\s")
WORD = re.compile(r"[a-z0-9]+")
SPEAKER_TOP = 50


def _words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def speaker_of(line: str) -> str | None:
    """The label before "Name: " of a transcript line (at most four words), or None."""
    match = SPEAKER_LINE.match(line)
    return match.group(1) if match and len(match.group(1).split()) <= 4 else None


def named_speakers(query: str, labels: set[str]) -> set[str]:
    """The speakers a query names: labels that stand whole in it ("PhD A", "Project Manager"), else
    labels sharing a word of four letters or more with it ("the professor" names "Professor C")."""
    text = f" {' '.join(_words(query))} "
    whole = {label for label in labels if f" {' '.join(_words(label))} " in text}
    if whole:
        return whole
    words = set(text.split())
    return {label for label in labels if any(len(word) >= 4 and word in words for word in _words(label))}


def speaker_share(lines: list[str], named: set[str], weights: dict[str, float]) -> float:
    """The part of a chunk's query-word weight that stands in lines of the named speakers (a word of a
    line matches a lexeme it starts with); without any, the part of its spoken lines theirs."""
    in_named = in_all = 0.0
    speakers = [speaker_of(line) for line in lines]
    for speaker, line in zip(speakers, lines):
        words = _words(line)
        mass = sum(weight for lexeme, weight in weights.items() if any(word.startswith(lexeme) for word in words))
        in_all += mass
        if speaker in named:
            in_named += mass
    if in_all > 0:
        return in_named / in_all
    spoken = [speaker for speaker in speakers if speaker]
    return sum(speaker in named for speaker in spoken) / len(spoken) if spoken else 1.0


def list_question(query: str) -> bool:
    """Whether ``query`` asks for a list: "What" or "Which" (with "kind of" and the like) then a plural."""
    match = LIST_QUESTION.match(query)
    word = match.group(1).lower() if match else ""
    return word.endswith("s") and not word.endswith("ss") and word not in NOT_PLURAL


def file_spread(candidates: list, *, file_of, factor: float) -> list:
    """``candidates`` (best first) each scored × ``factor`` ** (better candidates of its file), re-sorted."""
    seen: dict[int, int] = {}
    for candidate in candidates:
        file_id = file_of(candidate)
        candidate.score *= factor ** seen.get(file_id, 0)
        seen[file_id] = seen.get(file_id, 0) + 1
    return sorted(candidates, key=lambda c: -c.score)


def centred(vector: list[float], centroid: list[float], alpha: float) -> list[float]:
    """``vector - alpha * centroid``, of unit length."""
    moved = [value - alpha * mean for value, mean in zip(vector, centroid)]
    norm = math.sqrt(sum(value * value for value in moved)) or 1.0
    return [value / norm for value in moved]


def _agent_centroid(agent_id: int, identity, cache: dict) -> list[float] | None:
    from indexing.tables import CHUNK
    from memoryhub.replicas import read_connection

    key = (agent_id, identity.key)
    if key not in cache:
        dims = int(identity.dimensions)
        with read_connection.cursor() as cursor:
            cursor.execute(
                f"SELECT avg(c.embedding::vector({dims}))::text FROM {CHUNK} c WHERE c.agent_id = %s "
                f"AND c.embedding_dimensions = {dims} AND c.embedding_identity = %s AND c.embedding IS NOT NULL",
                [agent_id, identity.key],
            )
            row = cursor.fetchone()
        cache[key] = [float(x) for x in row[0].strip("[]").split(",")] if row and row[0] else None
    return cache[key]


def _speaker_stage(*, agent_id: int, query: str, candidates: list, keyword, weight: float) -> list:
    from indexing.models import Chunk

    top = candidates[:SPEAKER_TOP]
    texts = dict(Chunk.objects.filter(agent_id=agent_id, pk__in=[c.chunk_id for c in top]).values_list("id", "text"))
    lines = {chunk_id: text.split("\n") for chunk_id, text in texts.items()}
    labels = {speaker for rows in lines.values() for line in rows if (speaker := speaker_of(line))}
    named = named_speakers(query, labels)
    if not named:
        return candidates
    names = {word for label in named for word in _words(label)}
    weights = {lexeme: keyword.idf.get(lexeme, 1.0) for lexeme in keyword.lexemes if lexeme not in names}
    for candidate in top:
        if candidate.chunk_id in lines:
            candidate.score *= 1 - weight * (1 - speaker_share(lines[candidate.chunk_id], named, weights))
    return sorted(top, key=lambda c: -c.score) + candidates[SPEAKER_TOP:]


def list_questions_recall(details: str) -> str:
    """LoCoMo's multi-hop questions (category 1) of a ``bench_variants --details`` file: how many ask for a
    list, and the mean evidence recall of those and of the others."""
    recalls: dict[bool, list[float]] = {True: [], False: []}
    with open(details) as lines:
        for line in lines:
            row = json.loads(line)
            if row["set"] == "locomo" and row["category"] == 1:
                recalls[list_question(row["question"])].append(row["score"]["recall"])
    return " | ".join(
        f"{'list' if asks else 'other'} questions {len(found)}, recall {sum(found) / len(found):.3f}"
        for asks, found in recalls.items() if found
    )


def main(argv: list[str]) -> None:
    from django.core.management import call_command

    if argv[:1] == ["--list-recall"]:
        print(list_questions_recall(argv[1]))
        return

    import search.services as services

    nearest_before, results_before = services._nearest, services._results
    centroids: dict = {}

    def nearest(*, agent, vectors, identity, **rest):
        alpha = getattr(settings, "MEMORYHUB_SEARCH_EXP_CENTER", 0.0)
        centroid = _agent_centroid(agent.pk, identity, centroids) if alpha else None
        if centroid is not None:
            vectors = [centred(vector, centroid, alpha) for vector in vectors]
        return nearest_before(agent=agent, vectors=vectors, identity=identity, **rest)

    def results(*, agent_id, candidates, spans, keyword, query="", **rest):
        speaker = getattr(settings, "MEMORYHUB_SEARCH_EXP_SPEAKER", 0.0)
        if speaker and query and candidates:
            candidates = sorted(candidates, key=lambda c: -c.score)
            candidates = _speaker_stage(agent_id=agent_id, query=query, candidates=candidates, keyword=keyword, weight=speaker)
        spread = float(getattr(settings, "MEMORYHUB_SEARCH_EXP_FILE_SPREAD", 0.0))
        every = bool(int(getattr(settings, "MEMORYHUB_SEARCH_EXP_FILE_SPREAD_ALL", 0)))
        if spread and query and candidates and (every or list_question(query)):
            candidates = file_spread(
                sorted(candidates, key=lambda c: -c.score), file_of=lambda c: spans[c.chunk_id][0], factor=spread
            )
        return results_before(agent_id=agent_id, candidates=candidates, spans=spans, keyword=keyword, query=query, **rest)

    services._nearest, services._results = nearest, results
    call_command("bench_variants", *argv)


if __name__ == "__main__":
    main(sys.argv[1:])
