"""``memoryhub-client search`` against the live server's POST /api/v1/search."""

import json
import re

from tests.client.conftest import write


def pushed_workspace(hub, root):
    write(root, "MEMORY.md", "# Memory\n\n## Drinks\n\nThe user prefers green tea in the afternoon.\n")
    write(root, "memory/2026-03-02.md", "# 2026-03-02\n\n## Health\n\nDentist on Thursday at 9:30, bring the insurance card.\n")
    write(root, "sessions/chat.jsonl", '{"role": "user", "content": "The dentist moved to Friday."}\n')
    assert hub("push", root).code == 0
    return root


def test_search_prints_ranked_cited_results_with_snippets(hub, tmp_path):
    pushed_workspace(hub, tmp_path / "ws")

    outcome = hub("search", "green tea afternoon")

    assert outcome.code == 0, outcome.err
    first, *rest = outcome.out.splitlines()
    assert re.fullmatch(r"MEMORY\.md#L\d+-L\d+  \d+\.\d{3}", first), outcome.out
    assert "    The user prefers green tea in the afternoon." in rest
    assert re.search(r"^\d+ results? \((hybrid|keyword|vector), \d+ ms\)$", outcome.err, re.M), outcome.err


def test_search_json_and_filters_are_passed_to_the_server(hub, tmp_path):
    pushed_workspace(hub, tmp_path / "ws")

    outcome = hub("search", "dentist", "--json", "--source", "session", "-n", "3", "--mode", "keyword")

    assert outcome.code == 0, outcome.err
    response = json.loads(outcome.out)
    assert response["mode"] == "keyword"
    assert [r["path"] for r in response["results"]] == ["sessions/chat.jsonl"]
    assert response["results"][0]["start_line"] == 1


def test_search_says_plainly_when_nothing_matched(hub, tmp_path):
    pushed_workspace(hub, tmp_path / "ws")

    outcome = hub("search", "xylophone quasar", "--mode", "keyword")

    assert outcome.code == 0, outcome.err
    assert outcome.out.strip() and "#L" not in outcome.out
    assert outcome.err.startswith("0 results")


def test_search_errors_exit_1_or_2(hub):
    bad_token = hub("search", "tea", token="mh_" + "z" * 43)
    bad_mode = hub("search", "tea", "--mode", "fuzzy")
    too_many = hub("search", "tea", "-n", "5000")

    assert bad_token.code == 1 and "POST search: 401" in bad_token.err
    assert bad_mode.code == 2 and "invalid choice" in bad_mode.err
    assert too_many.code == 1 and "POST search: 400" in too_many.err
