"""Fusion arithmetic and the score scale (0..1) that min_score is defined on."""

import pytest

from search.fusion import Candidate, diversified, fuse, neighbour_credit, overlaps_deferred, similarity, stretch_runs
from search.keyword import KeywordHit


def kw(*pairs):
    return [KeywordHit(chunk_id=cid, score=score, bm25=score * 7) for cid, score in pairs]


def test_weighted_fusion_is_the_weighted_mean_of_similarity_and_keyword_score():
    ranked = fuse(vector=[(1, 0.2), (2, 0.6)], keyword=kw((2, 1.0), (3, 0.5)))
    scores = {c.chunk_id: c.score for c in ranked}
    assert scores[1] == pytest.approx(0.5 * 0.8)
    assert scores[2] == pytest.approx(0.5 * 0.4 + 0.5 * 1.0)
    assert scores[3] == pytest.approx(0.5 * 0.5)
    assert [c.chunk_id for c in ranked] == [2, 1, 3]


def test_the_best_keyword_hit_alone_scores_half_and_survives_the_default_threshold():
    ranked = fuse(vector=[], keyword=kw((7, 1.0)))
    assert ranked[0].score == pytest.approx(0.5)
    assert ranked[0].score >= 0.1


def test_other_weights_are_normalised():
    ranked = fuse(vector=[(1, 0.0)], keyword=kw((1, 1.0)), vector_weight=0.7, keyword_weight=0.3)
    assert ranked[0].score == pytest.approx(1.0)
    keyword_only = fuse(vector=[], keyword=kw((1, 1.0)), vector_weight=0.7, keyword_weight=0.3)
    assert keyword_only[0].score == pytest.approx(0.3)


def test_single_mode_scores_are_that_half_alone():
    assert fuse(vector=[(1, 0.25)], keyword=[], vector_weight=1, keyword_weight=0)[0].score == pytest.approx(0.75)
    assert fuse(vector=[], keyword=kw((1, 0.4)), vector_weight=0, keyword_weight=1)[0].score == pytest.approx(0.4)


def test_rrf_is_normalised_so_first_in_both_halves_is_one():
    ranked = fuse(vector=[(1, 0.1), (2, 0.2)], keyword=kw((1, 1.0), (3, 0.9)), method="rrf", rrf_k=60)
    scores = {c.chunk_id: c.score for c in ranked}
    assert scores[1] == pytest.approx(1.0)
    assert scores[2] == pytest.approx((0.5 / 62) / (1 / 61))
    assert scores[3] == pytest.approx((0.5 / 62) / (1 / 61))
    assert fuse(vector=[], keyword=kw((9, 1.0)), method="rrf")[0].score == pytest.approx(0.5)


def test_ties_prefer_the_better_vector_rank():
    ranked = fuse(vector=[(5, 0.5), (4, 0.5)], keyword=[])
    assert [c.chunk_id for c in ranked] == [5, 4]


def test_similarity_is_clamped_to_zero_one():
    assert similarity(0.0) == 1.0
    assert similarity(1.5) == 0.0
    assert similarity(0.3) == pytest.approx(0.7)


def test_explain_carries_both_ranks_and_scores():
    [c] = fuse(vector=[(1, 0.2)], keyword=kw((1, 0.5)))
    assert c.explain() == {"vector_rank": 1, "vector_score": 0.8, "keyword_rank": 1, "keyword_score": 0.5}


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        fuse(vector=[], keyword=[], method="max")
    with pytest.raises(ValueError):
        fuse(vector=[], keyword=[], vector_weight=0, keyword_weight=0)


def test_near_duplicates_go_last_and_the_best_hits_get_a_second_snippet():
    spans = {1: ("a", 1, 10), 2: ("a", 3, 12), 3: ("b", 1, 5), 4: ("a", 10, 20)}
    hits = [Candidate(1, score=1.0), Candidate(2, score=0.9), Candidate(3, score=0.8), Candidate(4, score=0.5)]
    ordered = overlaps_deferred(hits, span=lambda c: spans[c.chunk_id], second_snippet=0.7)
    # 2 shares 8 of its 10 lines with 1: a near-duplicate, last. 4 shares one line with 1: a hit of its own.
    assert [(c.chunk_id, round(c.score, 2)) for c in ordered] == [
        (1, 1.0), (3, 0.8), (1, 0.7), (3, 0.56), (4, 0.5), (4, 0.35), (2, 0.9)
    ]
    assert hits[0].score == 1.0  # the second entry is a copy; the hit keeps its score
    single = overlaps_deferred(hits, span=lambda c: spans[c.chunk_id], second_snippet=0)
    assert [c.chunk_id for c in single] == [1, 3, 4, 2]


def test_minmax_stretches_the_vector_half_over_the_querys_candidates():
    # Similarities 0.80 / 0.75 / 0.70 (a narrow band) become 1 / 0.5 / 0; keyword scores stay as they are.
    ranked = fuse(vector=[(1, 0.20), (2, 0.25), (3, 0.30)], keyword=kw((3, 1.0), (4, 0.2)), method="minmax")
    scores = {c.chunk_id: c.score for c in ranked}
    assert scores[1] == pytest.approx(0.5 * 1.0)
    assert scores[2] == pytest.approx(0.5 * 0.5)
    assert scores[3] == pytest.approx(0.5 * 0.0 + 0.5 * 1.0)
    assert scores[4] == pytest.approx(0.5 * 0.2)  # a weaker keyword match keeps its share (above min_score)
    assert [c.chunk_id for c in ranked][:2] == [1, 3]  # ties: the better vector rank first
    # Weighted fusion lets the narrow vector band hand the ranking to the keyword half: chunk 3 first.
    assert [c.chunk_id for c in fuse(vector=[(1, 0.20), (2, 0.25), (3, 0.30)], keyword=kw((3, 1.0), (4, 0.2)))][0] == 3


def test_minmax_keeps_the_best_keyword_hit_above_the_default_threshold():
    ranked = fuse(vector=[(1, 0.3)], keyword=kw((7, 1.0)), method="minmax")
    assert {c.chunk_id: c.score for c in ranked}[7] == pytest.approx(0.5)


def test_adaptive_fusion_leans_on_the_half_that_can_tell_its_hits_apart():
    # Vector half fairly flat (best 0.60, 10th 0.45: peak 0.25), keyword half peaked (1.0 against 0.1: 0.9).
    vector = [(1, 0.40), (2, 0.50)] + [(i, 0.55) for i in range(3, 11)]
    keyword = kw((2, 1.0), (1, 0.4), *[(i, 0.1) for i in range(3, 11)])
    # Fixed weights: chunk 1 (best by meaning) wins, 0.5 + 0.2 against 0.17 + 0.5.
    assert [c.chunk_id for c in fuse(vector=vector, keyword=keyword, method="minmax")][0] == 1
    # Adaptive: the peaked keyword half weighs 0.95 against 0.625, and its best (chunk 2) wins.
    assert [c.chunk_id for c in fuse(vector=vector, keyword=keyword, method="adaptive")][0] == 2
    # The other way round: keyword scores flat, one vector hit standing out: meaning decides.
    vector = [(1, 0.10)] + [(i, 0.70) for i in range(2, 11)]
    keyword = kw((2, 1.0), (1, 0.9), *[(i, 0.95) for i in range(3, 11)])
    assert [c.chunk_id for c in fuse(vector=vector, keyword=keyword, method="adaptive")][0] == 1


def test_adaptive_weights_are_the_configured_ones_times_one_plus_each_halfs_peak():
    from search.fusion import Candidate, adaptive_weights

    scores = [(0.8, 1.0)] + [(0.6, 0.9)] * 8 + [(0.4, 0.25)] + [(0.1, 0.1)] * 5  # the 10th: 0.4 and 0.25
    candidates = [Candidate(i, vector_score=v, keyword_score=k) for i, (v, k) in enumerate(scores)]
    vector_weight, keyword_weight = adaptive_weights(candidates, 0.5, 0.5)
    assert vector_weight == pytest.approx(0.5 * (1 + 0.5)) and keyword_weight == pytest.approx(0.5 * (1 + 0.75))
    # Fewer than 10 candidates in a half (a tiny memory): the configured weights stand.
    assert adaptive_weights(candidates[:9], 0.5, 0.5) == (0.5, 0.5)
    # One half alone (keyword mode) keeps the configured weights.
    assert adaptive_weights([Candidate(i, keyword_score=1.0 / i) for i in range(1, 20)], 0.0, 1.0) == (0.0, 1.0)


def test_adaptive_keeps_a_keyword_only_hit_above_the_default_threshold():
    ranked = fuse(vector=[(1, 0.0), (2, 0.9)], keyword=kw((7, 1.0), (8, 0.99)), method="adaptive")
    assert next(c for c in ranked if c.chunk_id == 7).score >= 1 / 3 > 0.1


def test_neighbour_credit_lifts_a_chunk_towards_the_mean_of_the_chunks_around_it_in_its_file():
    # File 1: chunks 1-2-3 in a row (overlapping or touching lines); chunk 4 far below; file 2: chunk 5.
    spans = {1: (1, 1, 10), 2: (1, 9, 20), 3: (1, 21, 30), 4: (1, 80, 90), 5: (2, 11, 19)}
    scores = {1: 0.3, 2: 0.5, 3: 0.9, 4: 0.52, 5: 0.6}
    ranked = neighbour_credit([Candidate(i, score) for i, score in scores.items()], spans=spans, weight=0.5)
    got = {c.chunk_id: round(c.score, 4) for c in ranked}
    assert got == {
        1: 0.3,  # its neighbours' mean (0 before, 0.5 after) 0.25: not lowered
        2: round((0.5 + 0.5 * (0.3 + 0.9) / 2) / 1.5, 4),  # 8-line overlap before, touching after: 0.5333
        3: 0.9,
        4: 0.52,  # alone in its stretch of the file
        5: 0.6,  # lines 11-19 of another file are not chunk 2's neighbours
    }
    assert [c.chunk_id for c in ranked] == [3, 5, 2, 4, 1]  # chunk 2, inside a stretch, passes the lone chunk 4


def test_neighbour_credit_off_leaves_the_ranking_as_fused():
    ranked = [Candidate(1, 0.9), Candidate(2, 0.3)]
    assert neighbour_credit(ranked, spans={1: (1, 1, 5), 2: (1, 6, 9)}, weight=0) == ranked
    assert [c.score for c in ranked] == [0.9, 0.3]
    assert [c.in_stretch for c in ranked] == [False, True]  # marked at any weight: chunk 2's neighbour scores 0.9


def test_a_chunk_whose_neighbours_score_as_well_as_itself_is_in_a_stretch():
    # The same file as above: the mark compares the neighbours' mean with the chunk's score before any lift.
    spans = {1: (1, 1, 10), 2: (1, 9, 20), 3: (1, 21, 30), 4: (1, 80, 90), 5: (2, 11, 19)}
    scores = {1: 0.3, 2: 0.5, 3: 0.9, 4: 0.52, 5: 0.6}
    ranked = neighbour_credit([Candidate(i, score) for i, score in scores.items()], spans=spans, weight=0.5)
    marks = {c.chunk_id: c.in_stretch for c in ranked}
    assert marks == {
        1: False,  # nothing before it, chunk 2 after: (0 + 0.5) / 2 = 0.25 < 0.3
        2: True,  # (0.3 + 0.9) / 2 = 0.6 >= 0.5
        3: False,  # (0.5 + 0) / 2 = 0.25 < 0.9: a peak, not a stretch
        4: None,  # no neighbour among the candidates
        5: None,
    }
    assert ranked[0].explain()["in_stretch"] is False and "in_stretch" not in next(c for c in ranked if c.chunk_id == 4).explain()


def test_the_best_chunk_of_a_long_run_of_touching_chunks_among_the_best_is_in_a_stretch():
    # File 1: chunks 1-4 run on (overlapping or touching lines), chunk 5 stands apart, chunks 6-7 touch;
    # file 2: chunk 8 continues file 1's line numbers but is another file.
    spans = {
        1: (1, 1, 10), 2: (1, 9, 20), 3: (1, 21, 30), 4: (1, 28, 40), 5: (1, 60, 70), 6: (1, 90, 99),
        7: (1, 100, 110), 8: (2, 41, 50),
    }
    order = [8, 2, 3, 6, 1, 7, 5, 4]  # best first

    def ranked():
        candidates = [Candidate(i, 1 - n / 10) for n, i in enumerate(order)]
        candidates[2].in_stretch = False  # chunk 3: neighbour_credit's marks of the others are left as they are
        return candidates

    marked = ranked()
    stretch_runs(marked, spans=spans, depth=8, length=4)
    # 1-4: a run of four whose best is chunk 2; 6-7: a run of two; 8: another file.
    assert {c.chunk_id: c.in_stretch for c in marked} == {8: None, 2: True, 3: False, 6: None, 1: None, 7: None, 5: None, 4: None}
    assert marked[1].explain()["in_stretch"] is True

    for depth, length in ((7, 4), (8, 0), (8, 5)):  # chunk 4, eighth, past the depth; off; a run too short
        marked = ranked()
        stretch_runs(marked, spans=spans, depth=depth, length=length)
        assert not any(c.in_stretch for c in marked)


def test_diversified_takes_the_best_then_the_one_least_like_those_taken():
    # Chunk 2 retells chunk 1 (similarity 0.9); chunk 3 is about something else.
    ranked = [Candidate(1, 0.9), Candidate(2, 0.85), Candidate(3, 0.8)]
    similarity = {(1, 2): 0.9, (1, 3): 0.1, (2, 3): 0.2}
    order = diversified(ranked, similarity=similarity, weight=0.2, depth=30)
    assert [c.chunk_id for c in order] == [1, 3, 2]  # 0.8 - 0.02 passes 0.85 - 0.18
    assert [round(c.score, 4) for c in order] == [0.9, 0.78, 0.67]  # the value it was taken at
    assert [c.diversity_penalty for c in order] == [None, pytest.approx(0.02), pytest.approx(0.18)]
    assert order[2].explain()["diversity_penalty"] == 0.18 and "diversity_penalty" not in order[0].explain()


def test_diversified_keeps_the_fusions_order_without_a_weight_or_a_vector():
    ranked = [Candidate(1, 0.9), Candidate(2, 0.85)]
    assert diversified(ranked, similarity={(1, 2): 0.99}, weight=0, depth=30) == ranked
    # A pair without a similarity (a chunk with no vector yet) counts as unlike: nothing moves.
    assert [c.chunk_id for c in diversified(ranked, similarity={}, weight=1.0, depth=30)] == [1, 2]
    assert [c.score for c in ranked] == [0.9, 0.85]


def test_diversified_reorders_only_the_best_depth_candidates():
    # 0 and 1 are alike, 2 is not; with depth 2 only 0 and 1 are reordered, and 2 stays after them.
    ranked = [Candidate(0, 0.9), Candidate(1, 0.85), Candidate(2, 0.8)]
    alike = {(0, 1): 1.0}
    assert [c.chunk_id for c in diversified(ranked, similarity=alike, weight=0.5, depth=2)] == [0, 1, 2]
    assert [round(c.score, 2) for c in ranked] == [0.9, 0.35, 0.8]  # 1 lowered, 2 untouched
    ranked = [Candidate(0, 0.9), Candidate(1, 0.85), Candidate(2, 0.8)]
    assert [c.chunk_id for c in diversified(ranked, similarity=alike, weight=0.5, depth=3)] == [0, 2, 1]
