"""Any query string is answered (200) or refused (400), never a 500: punctuation, quotes, tsquery
operators, SQL, emoji, CJK, control characters, 10,000 characters, only stop words."""

import json

import pytest
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

NASTY = [
    "'", '"', "\\", "''", "\\'", "a & b", "a | b", "!a", "a <-> b", "a:*", "(a", "a)", "&|!", ":*", "<2>",
    "'; DROP TABLE indexing_chunk; --", "1 OR 1=1", "%s %(x)s {0} {}", "$1", "NOT AND OR", "and or not",
    "🙂🔥 deploy 🚀", "長期記憶", "我喜欢记忆", "東京のプロジェクト", "한국어 메모", "the of and a to is",
    "what is it", "\x00", "a\x00b", "\ud800", "\u200b", "\t\n\r", "x" * 10_000, "deploy " * 1_400,
    "word" + "'" * 5000, "é" * 3000, "\\" * 2000, "a:*" * 1000,
]


def post(member, body):
    # json.dumps escapes lone surrogates (\ud800) as a client would send them; the test client cannot.
    return member.client.post("/api/v1/search", json.dumps(body), content_type="application/json")


@pytest.fixture
def searchable(alice, index_files):
    index_files(alice, {
        "memory/notes.md": "We deploy on Tuesdays. O'Brien's backup & restore works! 长期记忆 is Chinese. 🙂",
        "chats/a.jsonl": '{"role": "user", "content": "DROP TABLE talk: not a real SQL statement"}\n',
    })
    return alice


@pytest.mark.parametrize("query", NASTY)
@pytest.mark.parametrize("mode", ["hybrid", "keyword", "vector"])
def test_nasty_queries_never_fail(searchable, query, mode):
    response = post(searchable, {"query": query, "mode": mode})
    assert response.status_code in (200, 400), response.content[:300]
    if response.status_code == 200:
        body = response.json()
        assert body["mode"] in ("hybrid", "keyword", "vector")
        assert all(len(r["snippet"]) <= 700 for r in body["results"])


def test_a_query_of_stop_words_answers_plainly(searchable):
    response = post(searchable, {"query": "what is it", "mode": "keyword"})
    assert response.status_code == 200
    assert response.json()["message"].startswith("Nothing matched")


def test_a_query_over_ten_thousand_characters_is_a_400(searchable):
    response = post(searchable, {"query": "x" * 10_001})
    assert response.status_code == 400


@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.text(max_size=200)
       | st.from_regex(r"[\w'\"&|!():*<>\\ -]{0,80}", fullmatch=True),
       mode=st.sampled_from(["hybrid", "keyword", "vector"]))
def test_generated_queries_never_fail(searchable, query, mode):
    response = post(searchable, {"query": query, "mode": mode})
    assert response.status_code in (200, 400), (query, response.content[:300])
