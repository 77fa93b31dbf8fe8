"""A LlamaIndex retriever over MemoryHub search (the ``llama-index`` extra: ``llama-index-core``).

    from memoryhub_client.api import ApiClient
    from memoryhub_client.llama_index import MemoryHubRetriever

    retriever = MemoryHubRetriever(client=ApiClient(url=..., token=...), max_results=4)
    nodes = retriever.retrieve("which database did we choose?")

Each ``NodeWithScore`` holds one cited snippet: its score is the search score (0..1), its node a
``TextNode`` whose text is the snippet, whose id is the citation (``memory/2026-03-01.md#L3-L4``) and
whose metadata are those of the LangChain retriever (``path``, ``start_line``, ``end_line``, ``score``,
``source``, ``attributes``, ``citation``).
"""

from __future__ import annotations

from llama_index.core.callbacks import CallbackManager
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from memoryhub_client.api import ApiClient
from memoryhub_client.results import citation, result_metadata


class MemoryHubRetriever(BaseRetriever):
    """``POST search`` as a retriever; the keyword arguments are the search's fields."""

    def __init__(
        self,
        *,
        client: ApiClient,
        max_results: int | None = None,
        min_score: float | None = None,
        mode: str | None = None,
        sources: list[str] | None = None,
        path_prefix: str | None = None,
        filters: dict | None = None,
        callback_manager: CallbackManager | None = None,
    ):
        super().__init__(callback_manager=callback_manager)
        self.client = client
        self.search_fields = {
            "max_results": max_results, "min_score": min_score, "mode": mode, "sources": sources,
            "path_prefix": path_prefix, "filters": filters,
        }

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        answer = self.client.search(query_bundle.query_str, **self.search_fields)
        return [
            NodeWithScore(
                node=TextNode(id_=citation(result), text=result["snippet"], metadata=result_metadata(result)),
                score=result["score"],
            )
            for result in answer["results"]
        ]
