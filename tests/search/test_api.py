"""POST /api/v1/search as a client sees it: shape, modes, limits, thresholds, explain, fallbacks."""

import pytest

from indexing.embeddings import FakeProvider, ProviderTransientError
from indexing.models import MemoryFile
from indexing.writes import file_ingest
from search.services import memory_search
from memoryhub.domain import InvalidInput


@pytest.fixture
def indexed_notes(alice, index_files, notes):
    index_files(alice, {"memory/notes.md": notes, "MEMORY.md": "Alice prefers tea over coffee.\nHer cat is called Miso."})


def test_a_search_answers_cited_snippets(alice, indexed_notes, search):
    code, body = search(alice, "When do we deploy the billing service?")
    assert code == 200
    assert set(body) == {"results", "mode", "pending", "took_ms", "message"}
    assert body["mode"] == "hybrid" and body["pending"] == 0 and body["message"] == ""
    top = body["results"][0]
    assert set(top) == {"path", "start_line", "end_line", "score", "snippet", "source", "attributes"}
    assert top["path"] == "memory/notes.md" and top["source"] == "memory"
    assert "every Tuesday at 10:00" in top["snippet"]
    assert 0 < top["score"] <= 1


def test_read_only_tokens_may_search_and_anonymous_callers_may_not(alice, make_member, anonymous_client):
    reader = make_member("reader", scopes=["read"])
    assert reader.client.post("/api/v1/search", {"query": "x"}, format="json").status_code == 200
    response = anonymous_client.post("/api/v1/search", {"query": "x"}, format="json")
    assert response.status_code == 401
    assert response.json()["error"]["code"]


def test_explain_adds_both_ranks_and_scores(alice, indexed_notes, search):
    top = search(alice, "billing deploy Tuesday", explain=True)[1]["results"][0]
    assert set(top["explain"]) == {"vector_rank", "vector_score", "keyword_rank", "keyword_score"}
    assert top["explain"]["keyword_rank"] == 1
    assert top["explain"]["vector_rank"] >= 1


@pytest.mark.parametrize("mode", ["hybrid", "vector", "keyword"])
def test_every_mode_finds_the_file_and_says_which_mode_ran(alice, indexed_notes, search, mode):
    code, body = search(alice, "Caroline payments team proposals", mode=mode)
    assert code == 200 and body["mode"] == mode
    assert body["results"][0]["path"] == "memory/notes.md"


def test_max_results_defaults_to_six_and_is_capped_at_fifty(alice, index_files, search):
    index_files(alice, {f"memory/day-{i}.md": f"Note {i}: the garden needs watering." for i in range(10)})
    assert len(search(alice, "garden watering")[1]["results"]) == 6
    assert len(search(alice, "garden watering", max_results=8)[1]["results"]) == 8
    assert search(alice, "garden", max_results=50)[0] == 200
    for bad in [0, 51, -1, "six", 2.5, True]:
        code, body = search(alice, "garden", max_results=bad)
        assert code == 400, bad
        assert body["error"]["code"] == "invalid_request"


def test_an_exact_keyword_hit_without_vector_support_survives_the_default_threshold(alice, index_files, search):
    # The fake embedder hashes words: a query sharing no word stem with the text has ~0 similarity, so
    # this hit is carried by the keyword half alone.
    index_files(alice, {"memory/codes.md": "Door code: ZX-4471-QK for the storage room."})
    code, body = search(alice, "ZX-4471-QK", explain=True)
    top = body["results"][0]
    assert top["path"] == "memory/codes.md"
    assert top["explain"]["keyword_rank"] == 1
    assert top["score"] >= 0.5
    assert top["score"] >= 0.1


def test_min_score_drops_weaker_results_and_says_so(alice, indexed_notes, search, settings):
    settings.MEMORYHUB_SEARCH_FUSION = "weighted"  # min-max fusion can score a hit exactly 1.0: no threshold above it
    all_results = search(alice, "billing", min_score=0)[1]["results"]
    assert all_results
    best = all_results[0]["score"]
    code, body = search(alice, "billing", min_score=min(1.0, best + 0.01))
    assert code == 200 and body["results"] == []
    assert "score of at least" in body["message"]
    for bad in [-0.1, 1.5, "high"]:
        assert search(alice, "billing", min_score=bad)[0] == 400


def test_scores_are_non_increasing(alice, index_files, search):
    index_files(alice, {f"memory/n{i}.md": f"Note {i} about the garden and the roses {'roses ' * i}" for i in range(8)})
    scores = [r["score"] for r in search(alice, "garden roses", max_results=20)[1]["results"]]
    assert scores == sorted(scores, reverse=True)


def test_nothing_matched_is_said_plainly(alice, indexed_notes, search):
    code, body = search(alice, "zyzzyva quokka", mode="keyword")
    assert code == 200 and body["results"] == []
    assert body["message"].startswith("Nothing matched")


def test_pending_counts_files_not_yet_searchable(alice, indexed_notes, search):
    file_ingest(agent=alice.agent, path="memory/new.md", content="Fresh note about the billing service.")
    code, body = search(alice, "billing")
    assert body["pending"] == 1
    assert "still being indexed" in body["message"]


def test_without_an_embedding_provider_search_is_keyword_only_and_says_so(alice, indexed_notes, search, settings):
    settings.MEMORYHUB_EMBEDDING_PROVIDER = "none"
    code, body = search(alice, "billing deploy")
    assert code == 200 and body["mode"] == "keyword"
    assert "Keyword search only" in body["message"]
    assert body["results"][0]["path"] == "memory/notes.md"


def test_an_agent_without_vectors_of_the_current_model_falls_back_to_keywords(alice, indexed_notes, search, settings):
    settings.MEMORYHUB_EMBEDDING_MODEL = "another-model"
    FakeProvider.reset_counts()
    code, body = search(alice, "billing deploy", mode="vector")
    assert body["mode"] == "keyword"
    assert "another-model" in body["message"]
    assert body["results"][0]["path"] == "memory/notes.md"
    assert FakeProvider.queries_embedded == 0  # no point embedding a query nothing can be compared to


def test_a_failing_provider_degrades_to_keyword_search(alice, indexed_notes, search, monkeypatch):
    def boom(self, text):
        raise ProviderTransientError("rate limited")

    monkeypatch.setattr(FakeProvider, "embed_query", boom)
    code, body = search(alice, "billing deploy")
    assert code == 200 and body["mode"] == "keyword"
    assert "embedding provider failed" in body["message"]
    assert body["results"]


def test_query_embeddings_are_cached(alice, indexed_notes):
    FakeProvider.reset_counts()
    for _ in range(3):
        memory_search(agent=alice.agent, query="billing deploy")
    assert FakeProvider.queries_embedded == 1


def test_an_agent_is_never_answered_from_another_agents_cached_query(alice, bob, indexed_notes, index_files, settings):
    # A cached query is answered faster (took_ms): a hit would tell bob that another agent asked it.
    index_files(bob, {"MEMORY.md": "Bob deploys the billing service on Fridays."})
    FakeProvider.reset_counts()
    memory_search(agent=alice.agent, query="billing deploy")
    memory_search(agent=bob.agent, query="billing deploy")
    assert FakeProvider.queries_embedded == 2
    memory_search(agent=bob.agent, query="billing deploy")
    assert FakeProvider.queries_embedded == 2  # bob's own repeat is cached
    settings.MEMORYHUB_EMBEDDING_CACHE_SCOPE = "shared"  # one cache for every agent
    memory_search(agent=alice.agent, query="who deploys billing")
    memory_search(agent=bob.agent, query="who deploys billing")
    assert FakeProvider.queries_embedded == 3


def test_bad_input_is_a_400_with_a_reason(alice, search):
    for body in [{}, {"query": ""}, {"query": "   "}, {"query": 5.5, "mode": "fuzzy"}, {"query": "x", "sources": ["mail"]},
                 {"query": "x", "path_prefix": "/etc"}, {"query": "x", "path_prefix": "../up"}, {"query": "x" * 10_001},
                 {"query": "x", "modified_since": "yesterday"}, {"query": ["a"]}]:
        response = alice.client.post("/api/v1/search", body, format="json")
        assert response.status_code == 400, body
        assert response.json()["error"]["message"]
    assert alice.client.post("/api/v1/search", "[1, 2]", content_type="application/json").status_code == 400
    assert alice.client.post("/api/v1/search", "not json", content_type="application/json").status_code == 400


def test_the_service_refuses_bad_input_for_every_caller(alice):
    for kwargs in [{"query": ""}, {"query": "x", "max_results": 0}, {"query": "x", "mode": "semantic"},
                   {"query": "x", "min_score": float("nan")}]:
        with pytest.raises(InvalidInput) as error:
            memory_search(agent=alice.agent, **kwargs)
        assert error.value.code == "invalid_request"


def test_rrf_fusion_is_a_setting(alice, indexed_notes, search, settings):
    settings.MEMORYHUB_SEARCH_FUSION = "rrf"
    top = search(alice, "billing deploy Tuesday", explain=True)[1]["results"][0]
    assert top["path"] == "memory/notes.md"
    assert top["score"] == pytest.approx(1.0)  # first in both halves


def test_recency_boost_prefers_recent_daily_notes_when_enabled(alice, index_files, search, settings):
    index_files(alice, {"memory/2020-01-01.md": "Standup: the garden roses bloomed.",
                        "memory/2099-01-01.md": "Standup: the garden roses bloomed."})
    plain = search(alice, "garden roses", explain=True)[1]["results"]
    assert plain[0]["score"] == plain[1]["score"]
    settings.MEMORYHUB_SEARCH_RECENCY_BOOST = 0.5
    boosted = search(alice, "garden roses")[1]["results"]
    assert boosted[0]["path"] == "memory/2099-01-01.md"
    assert boosted[1]["score"] < boosted[0]["score"]
