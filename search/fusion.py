"""Fusing the two halves into one ranked list with one documented score scale (0..1).

Weighted fusion (default): ``score = (wv * vector + wk * keyword) / (wv + wk)`` where ``vector`` is the
cosine similarity (``1 - distance``, clamped to 0..1) and ``keyword`` is BM25 scaled so the query's best
keyword hit is 1.0. A half that did not return the chunk contributes 0. With the default 0.5 / 0.5 the
best exact keyword hit with no vector support scores 0.5, far above the default ``min_score`` of 0.1 —
unlike OpenClaw's 0.7/0.3 with 0.35, which silently drops it (openclaw#25183).

Min-max: like weighted, but the vector half's similarities are first stretched over this
query's candidates (best 1, worst 0). Cosine similarities of one agent's memory sit in a narrow band
(0.3-0.6 for all-MiniLM-L6-v2), while the keyword half already spans 0..1 (BM25 over the query's best),
so without the stretch the keyword half decides most rankings. The keyword half is not stretched: its
weakest real match keeps its share instead of dropping to 0 (and under min_score). A single vector
candidate scores 1.

Adaptive (default): min-max, with the two weights adapted to the query (``adaptive_weights``): each is
multiplied by 1 + how much its half's best score stands above its 10th best (0 for a flat half, towards
1 for a peaked one), so the half that can tell its best hits apart counts more for this query. Measured
on the three dev sets against min-max with fixed weights (docs/search.md): it helped LoCoMo and the
meetings on both parts and left the dialogue-shaped set where it was.

RRF: ``sum(w / (k + rank))`` over the halves, divided by its maximum ``sum(w / (k + 1))`` so that a chunk
ranked first by both halves scores 1.0 and one ranked first by one half only scores that half's share.

Long queries (``diversified``): a pasted stretch of dialogue talks about several memories, so its best
candidates are reordered by maximal marginal relevance, each later one lowered by its likeness to those
before it, and one event told in several notes does not take every result.

Overlapping hits: the chunker overlaps neighbouring windows, so one passage can come back as two or
three chunks of one file. ``overlaps_deferred`` moves a chunk that overlaps or touches a better-ranked
chunk of the same file (or a chain of such chunks) behind every other hit: other answers come first, and the later chunk is still
used when there is room (its snippet then shows only lines not shown yet).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, replace

from django.conf import settings

from search.keyword import KeywordHit

FUSION_METHODS = ("weighted", "rrf", "minmax", "adaptive")


@dataclass
class Candidate:
    chunk_id: int
    score: float = 0.0
    vector_rank: int | None = None  # 1-based rank in the vector half
    vector_score: float | None = None  # cosine similarity, 0..1
    keyword_rank: int | None = None
    keyword_score: float | None = None  # BM25 scaled to the query's best hit, 0..1
    rerank_rank: int | None = None  # 1-based rank given by the optional reranker (search/rerank.py)
    rerank_score: float | None = None
    diversity_penalty: float | None = None  # what ``diversified`` took off the score (long queries)
    date_match: bool | None = None  # a question naming a date: whether this chunk's file was written then
    # Whether the hit sits inside a stretch of matching text: the chunks around it in its file score at
    # least as well as itself on average (neighbour_credit), or it is the best of a long run of touching
    # chunks among the best (stretch_runs). None: no neighbour among the candidates.
    in_stretch: bool | None = None
    # Keyword expansion (search/expansion.py): the part of keyword_score its words gave, and the words.
    expansion_score: float | None = None
    expansion: dict[str, list[str]] | None = None
    # The chunk has no vector of the configured model (its file waits for its vectors, or failed after its
    # chunks were written) and is scored by its keyword half alone (keyword_scored_without_vectors). None: it
    # has one, or the search did not ask.
    without_vector: bool | None = None

    def explain(self) -> dict:
        explained = {
            "vector_rank": self.vector_rank,
            "vector_score": None if self.vector_score is None else round(self.vector_score, 4),
            "keyword_rank": self.keyword_rank,
            "keyword_score": None if self.keyword_score is None else round(self.keyword_score, 4),
        }
        if self.rerank_rank is not None:
            explained.update(rerank_rank=self.rerank_rank, rerank_score=round(self.rerank_score, 4))
        if self.diversity_penalty is not None:
            explained["diversity_penalty"] = round(self.diversity_penalty, 4)
        if self.date_match is not None:
            explained["date_match"] = self.date_match
        if self.in_stretch is not None:
            explained["in_stretch"] = self.in_stretch
        if self.expansion_score is not None:
            explained["expansion_score"] = round(self.expansion_score, 4)
        if self.expansion:
            explained["expansion"] = self.expansion
        if self.without_vector:
            explained["without_vector"] = True
        return explained


def similarity(distance: float) -> float:
    """Cosine distance (0..2) as a similarity on 0..1; opposite or orthogonal vectors score 0."""
    return min(1.0, max(0.0, 1.0 - distance))


def fuse(
    *,
    vector: list[tuple[int, float]],
    keyword: list[KeywordHit],
    method: str = "weighted",
    vector_weight: float = 0.5,
    keyword_weight: float = 0.5,
    rrf_k: int = 60,
) -> list[Candidate]:
    """One list of candidates, best first (ties: better vector rank, then keyword rank, then id).

    Only the halves that ran count: pass ``vector=[]`` with ``vector_weight=0`` for keyword mode, and
    the other way round for vector mode, so a single half scores on the same 0..1 scale.
    """
    if method not in FUSION_METHODS:
        raise ValueError(f"unknown fusion method {method!r}")
    if vector_weight < 0 or keyword_weight < 0 or vector_weight + keyword_weight <= 0:
        raise ValueError("fusion weights must be non-negative and not both zero")
    candidates: dict[int, Candidate] = {}
    for rank, (chunk_id, distance) in enumerate(vector, start=1):
        candidate = candidates.setdefault(chunk_id, Candidate(chunk_id))
        if candidate.vector_rank is None:
            candidate.vector_rank, candidate.vector_score = rank, similarity(distance)
    for rank, hit in enumerate(keyword, start=1):
        candidate = candidates.setdefault(hit.chunk_id, Candidate(hit.chunk_id))
        if candidate.keyword_rank is None:
            candidate.keyword_rank, candidate.keyword_score = rank, max(0.0, min(1.0, hit.score))
            candidate.expansion_score = hit.expansion_score

    total = vector_weight + keyword_weight
    if method == "adaptive":
        vector_weight, keyword_weight = adaptive_weights(candidates.values(), vector_weight, keyword_weight)
        total = vector_weight + keyword_weight
        method = "minmax"
    if method == "minmax":
        values = [c.vector_score for c in candidates.values() if c.vector_score is not None]
        if values:
            low, high = min(values), max(values)
            for c in candidates.values():
                if c.vector_score is not None:
                    c.vector_score = (c.vector_score - low) / (high - low) if high > low else 1.0
        method = "weighted"
    if method == "weighted":
        for c in candidates.values():
            c.score = (vector_weight * (c.vector_score or 0.0) + keyword_weight * (c.keyword_score or 0.0)) / total
    else:
        best = total / (rrf_k + 1)
        for c in candidates.values():
            raw = 0.0
            if c.vector_rank is not None:
                raw += vector_weight / (rrf_k + c.vector_rank)
            if c.keyword_rank is not None:
                raw += keyword_weight / (rrf_k + c.keyword_rank)
            c.score = raw / best

    return sorted(candidates.values(), key=_rank_key)


def keyword_only(candidate: Candidate) -> bool:
    """Whether only the keyword half found the candidate (the ones a chunk without a vector can be)."""
    return candidate.vector_rank is None and candidate.keyword_score is not None


def keyword_scored_without_vectors(candidates: list[Candidate], without: set[int]) -> list[Candidate]:
    """The candidates, each of ``without`` (chunks that have no vector of the configured model) that only the
    keyword half found scored by its keyword score alone, best first again.

    While a file waits for its vectors (an upload being embedded, a re-embedding after a model change, a
    provider's batch or outage), or when it failed after its chunks were written (a provider that refused
    one of its texts), the vector half cannot find its chunks, and a fused score would give them
    the keyword half's share only: the vector half then pushes up the files that have vectors, whatever
    they say. Scored as if their vector had scored what their keywords did, they keep their place. With a
    share of the dev agents' chunks left without a vector, the hybrid search fell below keyword search
    alone from about a quarter; scored so it stayed near the full index's (docs/search.md)."""
    if not without:
        return candidates
    for candidate in candidates:
        if candidate.chunk_id in without and keyword_only(candidate):
            candidate.score = candidate.keyword_score
            candidate.without_vector = True
    return sorted(candidates, key=_rank_key)


def _rank_key(c: Candidate) -> tuple:
    """Best score first; ties: better vector rank, then keyword rank, then id."""
    missing = 1 << 30
    return (-c.score, c.vector_rank or missing, c.keyword_rank or missing, c.chunk_id)


# Adaptive fusion reads each half's score at this depth against its best (see _peak).
ADAPTIVE_DEPTH = 10


def _peak(values: list[float]) -> float | None:
    """How far a half's best score stands above its ADAPTIVE_DEPTH-th best, relative to the best: 0
    when the half cannot tell its top hits apart, towards 1 when its first hits stand out. None when
    the half has fewer scores than that: a handful of candidates says nothing about the half (a tiny
    memory, or a query matching three chunks), and the configured weights stand."""
    if len(values) < ADAPTIVE_DEPTH:
        return None
    ordered = sorted(values, reverse=True)
    best, deep = ordered[0], ordered[ADAPTIVE_DEPTH - 1]
    return (best - deep) / best if best > 0 else None


def adaptive_weights(candidates, vector_weight: float, keyword_weight: float) -> tuple[float, float]:
    """The configured weights, each multiplied by (1 + its half's peak) for this query's candidates
    (raw cosine similarities and BM25 over the best, before any stretch). A query whose words are rare
    in the memory gives a peaked keyword half and leans on it; a query sharing only common words with
    the memory gives a flat keyword half and leans on meaning."""
    candidates = list(candidates)
    vector_peak = _peak([c.vector_score for c in candidates if c.vector_score is not None])
    keyword_peak = _peak([c.keyword_score for c in candidates if c.keyword_score is not None])
    if vector_peak is None or keyword_peak is None:
        return vector_weight, keyword_weight
    return vector_weight * (1 + vector_peak), keyword_weight * (1 + keyword_peak)


def diversified(
    ranked: list[Candidate], *, similarity: dict[tuple[int, int], float], weight: float, depth: int
) -> list[Candidate]:
    """The first ``depth`` candidates in the order of maximal marginal relevance: each next one is
    the candidate whose score minus ``weight`` × its highest similarity to one taken before is best, and
    that is its score from then on (the penalty is kept for ``explain``). ``similarity[(a, b)]``, ``a < b``,
    is the cosine similarity of two chunks' vectors (``search.vector.pairwise_similarity``); a pair without
    one (a chunk with no vector yet) counts 0.
    The candidates after the first ``depth`` keep their place after them.

    For long queries (a pasted stretch of dialogue, which talks about several memories): their best
    candidates are often one event told in several notes, and the six results then show it six times
    over. The first result keeps its score; a later one loses at most ``weight``. Measured on the
    dialogue-shaped sets (docs/search.md)."""
    if weight <= 0 or len(ranked) < 2:
        return ranked
    head, tail = ranked[:depth], ranked[depth:]
    taken: list[Candidate] = []
    # Each candidate's highest similarity to the taken ones, updated as each is taken.
    closest = {candidate.chunk_id: 0.0 for candidate in head}
    while head:
        best = max(head, key=lambda c: c.score - weight * closest[c.chunk_id])  # first of equals: fusion's order
        head.remove(best)
        penalty = weight * closest[best.chunk_id]
        if taken:
            best.score -= penalty
            best.diversity_penalty = penalty
        taken.append(best)
        for candidate in head:
            pair = (min(candidate.chunk_id, best.chunk_id), max(candidate.chunk_id, best.chunk_id))
            closest[candidate.chunk_id] = max(closest[candidate.chunk_id], similarity.get(pair, 0.0))
    return taken + tail


def neighbour_credit(ranked: list[Candidate], *, spans: dict[int, tuple[int, int, int]], weight: float) -> list[Candidate]:
    """Each candidate lifted towards its neighbours, ``max(score, (score + weight × n) / (1 + weight))``,
    where ``n`` is the mean score of the candidate just before it in its file and the one just after
    (chunks whose lines overlap or touch its own; 0 for a side with no such candidate), re-ranked.
    ``spans`` maps a chunk to (file id, start line, end line).

    An answer inside a stretch of matching chunks (a topic of a meeting runs over 30-60 lines, several
    chunks) is carried by the chunks around it; a chunk is never lowered, so a lone turn that answers
    keeps its own score (mixing without the max cost LoCoMo's temporal questions, whose answer is one
    turn). Scores stay on 0..1. Measured on the dev sets (docs/search.md).

    At any weight (0 included), a candidate with a neighbour is marked ``in_stretch`` when that mean is at
    least its own score: the snippets give such a hit more room (search/services.py)."""
    if not ranked:
        return ranked
    lifted: dict[int, float] = {}
    for chunks in _in_line_order(ranked, spans):
        if len(chunks) < 2:
            continue
        for i, (start, end, position) in enumerate(chunks):
            candidate = ranked[position]
            # The chunker's windows of a file start one after another: the neighbours are the nearest
            # candidates starting before and after this one, when their lines overlap or touch its own.
            j = i - 1
            while j >= 0 and chunks[j][0] == start:
                j -= 1
            has_before = j >= 0 and start - 1 <= chunks[j][1] < end
            before = ranked[chunks[j][2]].score if has_before else 0.0
            k = i + 1
            while k < len(chunks) and chunks[k][0] == start:
                k += 1
            has_after = k < len(chunks) and chunks[k][0] <= end + 1 and chunks[k][1] > end
            after = ranked[chunks[k][2]].score if has_after else 0.0
            if has_before or has_after:
                candidate.in_stretch = (before + after) / 2 >= candidate.score
            score = (candidate.score + weight * (before + after) / 2) / (1 + weight)
            if score > candidate.score:
                lifted[candidate.chunk_id] = score
    if not lifted:
        return ranked
    for candidate in ranked:
        candidate.score = lifted.get(candidate.chunk_id, candidate.score)
    return sorted(ranked, key=_rank_key)


def _in_line_order(ranked: list[Candidate], spans: dict[int, tuple[int, int, int]]) -> list[list[tuple[int, int, int]]]:
    """The candidates of each file as (start line, end line, position in ``ranked``), in the order of their
    lines (candidates starting and ending on the same lines: in ``ranked``'s order)."""
    by_file: dict[int, list[tuple[int, int, int]]] = {}
    for position, candidate in enumerate(ranked):
        file_id, start, end = spans[candidate.chunk_id]
        by_file.setdefault(file_id, []).append((start, end, position))
    return [sorted(chunks) for chunks in by_file.values()]


def stretch_runs(ranked: list[Candidate], *, spans: dict[int, tuple[int, int, int]], depth: int, length: int) -> None:
    """Mark ``in_stretch`` the best chunk of every run of at least ``length`` chunks among the ``depth``
    best candidates whose lines overlap or touch one another, one after another in one file (``spans``:
    chunk → (file id, start line, end line)); 0 marks none.

    ``neighbour_credit`` marks a hit whose two neighbours score as well as itself, which the best chunk of a
    stretch never does (it is the best by scoring above them), so the snippet at the centre of a topic
    discussed at length stayed narrow. A run of five chunks among an answer's ten or twelve best is such a
    topic (a meeting's discussion of one subject), not a question and its reply (two or three chunks). Only
    its best chunk is marked: the others are its neighbours, and a wide snippet for each took the room of
    the later results that held other evidence. Measured in docs/search.md."""
    if length <= 0 or len(ranked) < length:
        return
    for chunks in _in_line_order(ranked[:depth], spans):
        run: list[int] = []
        reach = 0  # the last line the run so far covers
        for start, end, position in chunks:
            if run and start > reach + 1:
                _mark_best(ranked, run, length)
                run = []
            reach = max(reach, end) if run else end
            run.append(position)
        _mark_best(ranked, run, length)


def _mark_best(ranked: list[Candidate], run: list[int], length: int) -> None:
    """The run's best candidate (the first of it in ``ranked``) is in a stretch, if the run is long enough."""
    if len(run) >= length:
        ranked[min(run)].in_stretch = True


def overlaps_deferred(ranked: list, *, span, second_snippet: float | None = None) -> Iterator:
    """The order in which hits get snippets. ``span(item) -> (file_id, start, end)``.

    1. Near-duplicates go last: a hit sharing more than half of its lines with a better hit of the same
       file is moved behind every other hit (in their original order).
    2. Second snippets: a snippet shows about a third of a 400-token chunk, and the answer often sits
       in the rest of the best chunks. So every hit also competes for a second result at its score ×
       ``second_snippet`` (MEMORYHUB_SEARCH_SECOND_SNIPPET; 0 turns this off); that result shows the
       chunk's lines not shown yet (snippets never show a line whole twice), or is skipped when there are none.

    Measured on LoCoMo (docs/search.md): deferring every overlapping or touching chunk
    (the previous rule) 0.754 evidence recall; near-duplicates only 0.779; plus second snippets at 0.7
    0.807 (0.5: 0.800, 0.9: 0.796).
    """
    factor = settings.MEMORYHUB_SEARCH_SECOND_SNIPPET if second_snippet is None else second_snippet
    # Lazy: a search reads a dozen of its ~200 candidates, so each is classified only when reached.
    # ``ranked`` is best first, so the hits and their second entries are two sorted streams to merge.
    source = iter(ranked)
    kept, deferred = [], []
    taken: dict[int, list[tuple[int, int]]] = {}

    def kept_at(position: int):
        while len(kept) <= position:
            item = next(source, None)
            if item is None:
                return None
            file_id, start, end = span(item)
            ranges = taken.setdefault(file_id, [])
            if any(min(end, e) - max(start, s) + 1 > (end - start + 1) / 2 for s, e in ranges):
                deferred.append(item)
            else:
                kept.append(item)
                ranges.append((start, end))
        return kept[position]

    def stream(second: int):
        position = 0
        while (item := kept_at(position)) is not None:
            yield (-(item.score * factor if second else item.score), second, position, item)
            position += 1

    streams = [stream(0), stream(1)] if factor > 0 else [stream(0)]
    for _, second, _, item in heapq.merge(*streams):
        yield replace(item, score=item.score * factor) if second else item
    yield from deferred  # complete: the kept stream ran to the end of ``ranked``
