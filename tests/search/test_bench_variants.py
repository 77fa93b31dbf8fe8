"""`manage.py bench_variants`: the dev sets indexed once in-process, each variant's settings applied to
every question (fake embeddings, a tiny conversation)."""

import json

import pytest
from django.core.management import CommandError, call_command

from agents.models import Agent
from benchmarks.management.commands.bench_variants import variant_parse
from tests.search.test_bench_search import TINY

LONG_TURN = (
    "I adopted a greyhound puppy called Biscuit yesterday, after months of visiting the shelter on the other "
    "side of town every Saturday morning."
)


@pytest.fixture
def tiny_data(tmp_path):
    """The tiny conversation of test_bench_search, its first turn longer than 80 characters."""
    data = json.loads(json.dumps(TINY))
    data[0]["conversation"]["session_1"][0]["text"] = LONG_TURN
    path = tmp_path / "tiny-locomo.json"
    path.write_text(json.dumps(data))
    return path


def test_each_variant_is_scored_with_its_own_settings(transactional_db, tiny_data, capsys, tmp_path):
    call_command(
        "bench_variants", "--data", str(tiny_data), "--only=locomo", "--part", "all", "--json",
        "--variant", "short:MEMORYHUB_SEARCH_SNIPPET_CHARS=80", "--details", str(tmp_path / "details"),
    )
    report = json.loads(capsys.readouterr().out)
    by_variant = report["sets"]["locomo"]
    # Two short sessions: the defaults find both evidence turns; 80-character snippets cut the long turn
    # before its 80th character (the protocol's match), so that question finds nothing.
    assert by_variant["default"]["tune"]["evidence_recall"] == 1.0
    assert by_variant["short"]["tune"]["evidence_recall"] == 0.5
    assert by_variant["default"]["modes_answered"] == {"hybrid": 2}
    assert report["variants"] == {"default": {}, "short": {"MEMORYHUB_SEARCH_SNIPPET_CHARS": 80}}
    assert not Agent.objects.filter(slug__startswith="variants-").exists()  # cleaned up without --reuse
    short = [json.loads(line) for line in (tmp_path / "details" / "short.jsonl").read_text().splitlines()]
    assert sorted(line["score"]["recall"] for line in short) == [0.0, 1.0]  # the long turn's question finds nothing
    assert all(line["set"] == "locomo" and line["results"] for line in short)


def test_reuse_indexes_once_and_keeps_the_agents(transactional_db, tiny_data, capsys):
    call_command("bench_variants", "--data", str(tiny_data), "--only=locomo", "--reuse", "t1", "--json")
    agent = Agent.objects.get(slug="variants-t1-locomo-0")
    chunk_ids = set(agent.chunks.values_list("id", flat=True))
    assert chunk_ids
    capsys.readouterr()
    call_command("bench_variants", "--data", str(tiny_data), "--only=locomo", "--reuse", "t1", "--json")
    report = json.loads(capsys.readouterr().out)
    assert report["sets"]["locomo"]["default"]["tune"]["evidence_recall"] == 1.0
    # The same agent and the same chunks: the second run asked its questions without indexing again.
    assert Agent.objects.get(slug="variants-t1-locomo-0").pk == agent.pk
    assert set(agent.chunks.values_list("id", flat=True)) == chunk_ids


@pytest.mark.parametrize("spec", ["no-colon", ":MEMORYHUB_SEARCH_X=1", "x:MEMORYHUB_CHUNK_TOKENS=100", "x:MEMORYHUB_SEARCH_X"])
def test_a_malformed_variant_is_refused(spec):
    with pytest.raises(CommandError):
        variant_parse(spec)


def test_variant_values_are_numbers_where_they_can_be():
    assert variant_parse("v:MEMORYHUB_SEARCH_BM25_K1=0.9,MEMORYHUB_SEARCH_CANDIDATE_POOL=50,MEMORYHUB_SEARCH_FUSION=rrf") == (
        "v", {"MEMORYHUB_SEARCH_BM25_K1": 0.9, "MEMORYHUB_SEARCH_CANDIDATE_POOL": 50, "MEMORYHUB_SEARCH_FUSION": "rrf"},
    )



def test_variant_values_true_and_false_are_booleans():
    # The string "false" is truthy: a boolean setting turned off this way stayed on (2026-11-28).
    assert variant_parse("v:MEMORYHUB_SEARCH_EXPANSION_ABSENT_WORDS=false,MEMORYHUB_SEARCH_X=True") == (
        "v", {"MEMORYHUB_SEARCH_EXPANSION_ABSENT_WORDS": False, "MEMORYHUB_SEARCH_X": True},
    )


def test_timing_interleaves_the_variants_searches(transactional_db, tiny_data, capsys, monkeypatch):
    """--timing: after one search that caches the query's embedding, each question is searched ROUNDS times
    under every variant, the variants' order turning from one search to the next."""
    from django.conf import settings

    from benchmarks.management.commands import bench_variants

    asked = []

    def recorded(**kwargs):
        asked.append(settings.MEMORYHUB_SEARCH_SNIPPET_CHARS)
        return memory_search(**kwargs)

    memory_search = bench_variants.memory_search
    monkeypatch.setattr(bench_variants, "memory_search", recorded)
    call_command(
        "bench_variants", "--data", str(tiny_data), "--only=locomo", "--part", "all", "--json", "--timing", "2",
        "--variant", "short:MEMORYHUB_SEARCH_SNIPPET_CHARS=80",
    )
    report = json.loads(capsys.readouterr().out)
    default_chars = settings.MEMORYHUB_SEARCH_SNIPPET_CHARS
    timed = report["timing"]["locomo"]
    assert set(timed) == {"default", "short"}
    assert all(t["searches"] == 4 and 0 < t["p50_ms"] <= t["p95_ms"] for t in timed.values())  # 2 questions x 2 rounds
    # The quality runs (2 questions per variant), then per question: a warm-up, then the rounds in turning order.
    d, s = default_chars, 80
    assert asked[:4] == [d, d, s, s]
    assert asked[4:] == [d, s, d, d, s] * 2
