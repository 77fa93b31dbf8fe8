"""The LangChain and LlamaIndex retrievers (the client's `langchain` / `llama-index` extras, which
`make install` installs) against the live server: cited documents, with the search's filters."""

import pytest

from memoryhub_client.api import ApiClient

langchain_core = pytest.importorskip("langchain_core", reason="the client's `langchain` extra (make install has it)")
llama_index_core = pytest.importorskip("llama_index.core", reason="the client's `llama-index` extra (make install has it)")

DAILY = "# 2026-03-01\n\n## Decisions\nWe chose Postgres for the billing service.\nDana owns the migration.\n"
NOTES = "Lunch: the team prefers the noodle place.\n"


@pytest.fixture
def memory(live_server, alice) -> ApiClient:
    api = ApiClient(url=live_server.url, token=alice.raw_token, retry_delays=())
    api.file_put(path="memory/2026-03-01.md", content=DAILY, attributes={"project": "billing"})
    api.file_put(path="notes/lunch.md", content=NOTES)
    return api


def test_the_langchain_retriever_returns_cited_documents(memory):
    from langchain_core.documents import Document

    from memoryhub_client.langchain import MemoryHubRetriever

    documents = MemoryHubRetriever(client=memory, max_results=3).invoke("which database did we choose for billing?")

    assert documents and all(isinstance(d, Document) for d in documents)
    first = documents[0]
    assert "We chose Postgres for the billing service." in first.page_content
    assert first.metadata["path"] == "memory/2026-03-01.md" and first.metadata["source"] == "memory"
    assert first.metadata["start_line"] <= 4 <= first.metadata["end_line"]
    assert first.metadata["citation"] == f"memory/2026-03-01.md#L{first.metadata['start_line']}-L{first.metadata['end_line']}"
    assert 0 < first.metadata["score"] <= 1 and first.metadata["attributes"] == {"project": "billing"}


def test_the_langchain_retriever_applies_its_filters(memory):
    from memoryhub_client.langchain import MemoryHubRetriever

    retriever = MemoryHubRetriever(client=memory, filters={"type": "eq", "key": "project", "value": "billing"})

    assert [d.metadata["path"] for d in retriever.invoke("noodle place lunch")] in ([], ["memory/2026-03-01.md"])
    assert [d.metadata["path"] for d in MemoryHubRetriever(client=memory).invoke("noodle place lunch")][:1] == ["notes/lunch.md"]


def test_the_llama_index_retriever_returns_scored_cited_nodes(memory):
    from llama_index.core.schema import NodeWithScore

    from memoryhub_client.llama_index import MemoryHubRetriever

    nodes = MemoryHubRetriever(client=memory, sources=["memory"]).retrieve("who owns the migration?")

    assert nodes and all(isinstance(n, NodeWithScore) for n in nodes)
    first = nodes[0]
    assert "Dana owns the migration." in first.node.get_content()
    assert first.score == first.node.metadata["score"] and 0 < first.score <= 1
    assert first.node.node_id == first.node.metadata["citation"] and first.node.node_id.startswith("memory/2026-03-01.md#L")
    assert {n.node.metadata["source"] for n in nodes} == {"memory"}
