"""Fusion arithmetic and the score scale (0..1) that min_score is defined on."""

import pytest

from search.fusion import fuse, overlaps_deferred, similarity
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


def test_overlapping_or_touching_hits_of_one_file_go_behind_the_other_answers():
    hits = [("a", 1, 10), ("a", 8, 20), ("b", 1, 5), ("a", 11, 14), ("a", 30, 40), ("b", 6, 9)]
    ordered = overlaps_deferred(hits, span=lambda h: h)
    assert ordered == [("a", 1, 10), ("b", 1, 5), ("a", 30, 40), ("a", 8, 20), ("a", 11, 14), ("b", 6, 9)]
