"""File attributes and the filters on them (issue 13, part 4), and unknown fields refused (part 5).

Attributes are set on PUT, append, sync and the write tools; search filters on them with OpenAI's
vector-store filter shape inside both halves, so a filtered search finds a matching file however many
better-scoring files do not match."""

import pytest

from indexing.attributes import AttributeFilter, InvalidAttributes, attributes_clean
from indexing.models import IndexJob, MemoryFile
from search.services import memory_search
from search.types import SearchFilters


# --- validation --------------------------------------------------------------------------------------


def test_attributes_are_a_small_flat_object_of_scalars():
    assert attributes_clean({"project": "falcon", "priority": 2, "done": False, "score": 0.5}) == {
        "project": "falcon", "priority": 2, "done": False, "score": 0.5,
    }
    for bad, words in [
        ([], "JSON object"),
        ({f"k{i}": i for i in range(17)}, "at most 16 keys"),
        ({"nested": {"a": 1}}, "strings, numbers or booleans"),
        ({"list": [1]}, "strings, numbers or booleans"),
        ({"none": None}, "strings, numbers or booleans"),
        ({"x'; DROP TABLE indexing_memoryfile; --": 1}, "not a valid key"),
        ({"": 1}, "non-empty"),
        ({"big": 2**60}, r"2\^53"),
        ({"nan": float("nan")}, "finite"),
        ({"long": "x" * 513}, "at most 512"),
    ]:
        with pytest.raises(InvalidAttributes, match=words):
            attributes_clean(bad)


@pytest.mark.parametrize(
    "raw, words",
    [
        ({"type": "like", "key": "a", "value": 1}, "must be one of"),
        ({"type": "eq", "key": "a"}, "needs a value"),
        ({"type": "eq", "value": 1}, "keys are non-empty strings"),
        ({"type": "eq", "key": "a", "value": 1, "extra": 2}, "unknown field 'extra'"),
        ({"type": "in", "key": "a", "value": 1}, "takes a list"),
        ({"type": "in", "key": "a", "value": []}, "takes a list"),
        ({"type": "gt", "key": "a", "value": True}, "not booleans"),
        ({"type": "eq", "key": "a", "value": {"b": 1}}, "strings, numbers or booleans"),
        ({"type": "and", "filters": []}, "non-empty list"),
        ({"type": "or"}, "non-empty list"),
        ("eq", "JSON object"),
        ({"type": "and", "filters": [{"type": "and", "filters": [{"type": "and", "filters": [
            {"type": "and", "filters": [{"type": "eq", "key": "a", "value": 1}]}]}]}]}, "nest at most"),
        ({"type": "or", "filters": [{"type": "eq", "key": "a", "value": i} for i in range(40)]}, "at most 32"),
    ],
)
def test_bad_filters_are_refused_with_the_field_named(raw, words):
    with pytest.raises(InvalidAttributes, match=words):
        AttributeFilter.parse(raw)


# --- search --------------------------------------------------------------------------------------------


FILES = {
    "projects/falcon.md": ("The kettle descales every Friday in the falcon lab.", {"project": "falcon", "priority": 2, "open": True}),
    "projects/apollo.md": ("The kettle in the apollo office is broken.", {"project": "apollo", "priority": 5, "open": False}),
    "projects/zeus.md": ("Zeus team kettle rota: Mondays.", {"project": "zeus", "priority": 9, "owner": "Bea"}),
    "projects/plain.md": ("A kettle note without labels.", None),
}


@pytest.fixture
def labelled(alice, index_files):
    for path, (content, attributes) in FILES.items():
        index_files(alice, {path: content}, **({"attributes": attributes} if attributes else {}))
    return alice


def paths_for(member, raw_filter, mode="hybrid") -> set[str]:
    response = memory_search(
        agent=member.agent, query="kettle", mode=mode, max_results=10, min_score=0,
        filters=SearchFilters(attributes=AttributeFilter.parse(raw_filter)),
    )
    return {result.path for result in response.results}


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid"])
@pytest.mark.parametrize(
    "raw, expected",
    [
        ({"type": "eq", "key": "project", "value": "falcon"}, {"falcon"}),
        ({"type": "ne", "key": "project", "value": "falcon"}, {"apollo", "zeus", "plain"}),  # no key: differs
        ({"type": "gt", "key": "priority", "value": 2}, {"apollo", "zeus"}),
        ({"type": "gte", "key": "priority", "value": 2}, {"falcon", "apollo", "zeus"}),
        ({"type": "lt", "key": "priority", "value": 5.5}, {"falcon", "apollo"}),
        ({"type": "lte", "key": "project", "value": "apollo"}, {"apollo"}),  # strings by code point
        ({"type": "gt", "key": "project", "value": 1}, set()),  # a number never compares with a string
        ({"type": "in", "key": "project", "value": ["zeus", "apollo", "nope"]}, {"apollo", "zeus"}),
        ({"type": "nin", "key": "project", "value": ["zeus", "apollo"]}, {"falcon", "plain"}),
        ({"type": "eq", "key": "open", "value": True}, {"falcon"}),
        ({"type": "eq", "key": "priority", "value": 2.0}, {"falcon"}),  # JSON equality: 2 == 2.0
        ({"type": "eq", "key": "priority", "value": "2"}, set()),  # but "2" is not 2
        ({"type": "and", "filters": [
            {"type": "gte", "key": "priority", "value": 2},
            {"type": "or", "filters": [{"type": "eq", "key": "open", "value": False}, {"type": "eq", "key": "owner", "value": "Bea"}]},
        ]}, {"apollo", "zeus"}),
    ],
)
def test_filters_select_the_files_whose_attributes_match(labelled, raw, expected, mode):
    assert paths_for(labelled, raw, mode=mode) == {f"projects/{name}.md" for name in expected}


def test_the_filter_is_applied_inside_the_halves_not_after_the_top_k(alice, index_files):
    # 40 files that score far better and do not match, one weak one that does: a filter applied after
    # the candidates were cut would find nothing.
    index_files(alice, {f"noise/{i:02}.md": "kettle kettle kettle descale the kettle " * 5 for i in range(40)})
    index_files(alice, {"needle.md": "Somewhere a kettle, once."}, attributes={"kind": "needle"})
    for mode in ("keyword", "vector", "hybrid"):
        assert paths_for(alice, {"type": "eq", "key": "kind", "value": "needle"}, mode=mode) == {"needle.md"}, mode


def test_another_agent_s_attributes_never_match(labelled, bob, index_files):
    index_files(bob, {"projects/falcon.md": "kettle"}, attributes={"project": "falcon"})
    assert paths_for(bob, {"type": "eq", "key": "project", "value": "falcon"}) == {"projects/falcon.md"}
    response = memory_search(agent=bob.agent, query="kettle", min_score=0)
    assert all(result.attributes == {"project": "falcon"} for result in response.results)


# --- the REST API ----------------------------------------------------------------------------------------


def test_search_api_takes_filters_and_answers_each_result_s_attributes(labelled, search):
    code, body = search(labelled, "kettle", filters={"type": "eq", "key": "project", "value": "apollo"}, min_score=0)
    assert code == 200
    assert [(r["path"], r["attributes"]) for r in body["results"]] == [
        ("projects/apollo.md", {"project": "apollo", "priority": 5, "open": False})
    ]


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"filters": {"type": "eq", "key": "project"}}, "filters"),
        ({"filters": "project=falcon"}, "filters"),
        ({"filter": {"type": "eq", "key": "project", "value": "falcon"}}, "filter: Unknown field"),
        ({"metadata": {"project": "falcon"}}, "metadata: Unknown field"),
    ],
)
def test_search_api_refuses_bad_filters_and_unknown_fields(labelled, search, fields, words):
    code, body = search(labelled, "kettle", **fields)
    assert code == 400
    assert body["error"]["code"] == "invalid_request" and words in body["error"]["message"]


def test_put_sets_attributes_and_a_change_of_attributes_alone_indexes_nothing(alice, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        created = alice.client.put(
            "/api/v1/files/memory/a.md", {"content": "kettle", "attributes": {"project": "falcon"}}, format="json"
        )
    assert created.status_code == 201 and created.json()["attributes"] == {"project": "falcon"}
    jobs = IndexJob.objects.filter(agent=alice.agent).count()

    relabelled = alice.client.put(
        "/api/v1/files/memory/a.md", {"content": "kettle", "attributes": {"project": "apollo", "n": 1}}, format="json"
    )
    assert relabelled.status_code == 200
    assert relabelled.json()["job"] is None and relabelled.json()["attributes"] == {"project": "apollo", "n": 1}
    assert IndexJob.objects.filter(agent=alice.agent).count() == jobs

    kept = alice.client.put("/api/v1/files/memory/a.md", {"content": "kettle and more"}, format="json")
    assert kept.status_code == 200 and kept.json()["attributes"] == {"project": "apollo", "n": 1}

    cleared = alice.client.put("/api/v1/files/memory/a.md", {"content": "kettle and more", "attributes": {}}, format="json")
    assert cleared.json()["attributes"] == {}
    listed = alice.client.get("/api/v1/files").json()["results"]
    assert [f["attributes"] for f in listed] == [{}]


@pytest.mark.parametrize(
    "method, url, body",
    [
        ("put", "/api/v1/files/memory/b.md", {"content": "x", "attributes": {"a": [1]}}),
        ("put", "/api/v1/files/memory/b.md", {"content": "x", "attributes": "a=1"}),
        ("put", "/api/v1/files/memory/b.md", {"content": "x", "metadata": {"a": 1}}),
        ("post", "/api/v1/files/memory/b.md/append", {"text": "x", "attributes": {f"k{i}": i for i in range(17)}}),
        ("post", "/api/v1/files/memory/b.md/append", {"text": "x", "mtim": 1}),
        ("post", "/api/v1/sync", {"files": [{"path": "memory/b.md", "content": "x", "attributes": {"a": None}}]}),
        ("post", "/api/v1/sync", {"files": [{"path": "memory/b.md", "content": "x", "contents": "y"}]}),
        ("post", "/api/v1/sync", {"files": [], "delete_mising": True}),
    ],
)
def test_bad_attributes_and_unknown_fields_write_nothing(alice, method, url, body):
    response = getattr(alice.client, method)(url, body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid_request"
    assert not MemoryFile.objects.filter(agent=alice.agent).exists()


def test_append_and_sync_set_attributes(alice, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        appended = alice.client.post(
            "/api/v1/files/memory/c.md/append", {"text": "one", "attributes": {"day": 1}}, format="json"
        )
        assert appended.status_code == 201 and appended.json()["attributes"] == {"day": 1}
        synced = alice.client.post(
            "/api/v1/sync",
            {"files": [
                {"path": "memory/c.md", "content": "one", "attributes": {"day": 2}},  # same text: relabel only
                {"path": "memory/d.md", "content": "two", "attributes": {"day": 3}},
            ]},
            format="json",
        )
    assert synced.status_code == 200 and synced.json()["changed"] == 1
    assert dict(MemoryFile.objects.filter(agent=alice.agent).values_list("path", "attributes")) == {
        "memory/c.md": {"day": 2}, "memory/d.md": {"day": 3},
    }


# --- the tools -----------------------------------------------------------------------------------------


def test_tools_write_attributes_and_search_filters_on_them(alice, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        for path, project in [("falcon.md", "falcon"), ("apollo.md", "apollo")]:
            written = alice.client.post(
                "/api/v1/tools/memory_write",
                {"path": path, "content": f"The {project} kettle schedule.", "attributes": {"project": project}},
                format="json",
            )
            assert written.status_code == 200, written.content
            assert written.json()["data"]["attributes"] == {"project": project}
    found = alice.client.post(
        "/api/v1/tools/memory_search",
        {"query": "kettle schedule", "filters": {"type": "eq", "key": "project", "value": "apollo"},
         "sources": ["memory"], "path_prefix": "memory/"},
        format="json",
    )
    assert found.status_code == 200
    results = found.json()["data"]["results"]
    assert [(r["path"], r["attributes"]) for r in results] == [("memory/apollo.md", {"project": "apollo"})]

    bad = alice.client.post(
        "/api/v1/tools/memory_search", {"query": "kettle", "filters": {"type": "eq", "key": "p"}}, format="json"
    )
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_arguments"
    assert "filters" in bad.json()["error"]["message"]
