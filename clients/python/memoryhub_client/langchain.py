"""A LangChain retriever over MemoryHub search (the ``langchain`` extra: ``langchain-core``).

    from memoryhub_client.api import ApiClient
from memoryhub_client.results import citation, result_metadata
    from memoryhub_client.langchain import MemoryHubRetriever

    retriever = MemoryHubRetriever(client=ApiClient(url=..., token=...), max_results=4)
    documents = retriever.invoke("which database did we choose?")

Each ``Document`` is one cited snippet: ``page_content`` the snippet, ``metadata`` the result's
``path``, ``start_line``, ``end_line``, ``score``, ``source``, ``attributes`` and ``citation``
(``memory/2026-03-01.md#L3-L4``, the form the memory tools cite in).
"""

from __future__ import annotations

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

from memoryhub_client.api import ApiClient
from memoryhub_client.results import citation, result_metadata


class MemoryHubRetriever(BaseRetriever):
    """``POST search`` as a retriever; the search fields (``max_results``, ``filters``, …) are its own."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: ApiClient
    max_results: int | None = None
    min_score: float | None = None
    mode: str | None = None
    sources: list[str] | None = None
    path_prefix: str | None = None
    filters: dict | None = None

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        answer = self.client.search(
            query, max_results=self.max_results, min_score=self.min_score, mode=self.mode, sources=self.sources,
            path_prefix=self.path_prefix, filters=self.filters,
        )
        return [
            Document(page_content=result["snippet"], metadata=result_metadata(result), id=citation(result))
            for result in answer["results"]
        ]
