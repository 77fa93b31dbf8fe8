"""The shapes that flow between the search halves, the search service and its callers
(REST API, tool endpoints, MCP, admin playground)."""

from dataclasses import dataclass, field
from datetime import datetime

from indexing.attributes import AttributeFilter


@dataclass(frozen=True)
class SearchFilters:
    """Restrictions applied to both halves of a search, always within one agent."""

    sources: tuple[str, ...] = ()  # MemoryFile.Source values; empty = all
    path_prefix: str = ""
    modified_since: datetime | None = None  # on the file's client mtime, else its last upload
    modified_until: datetime | None = None
    attributes: AttributeFilter | None = None  # the request's "filters" on file attributes

    def file_sql(self, alias: str = "f") -> tuple[str, list]:
        """A parameterised SQL fragment over indexing_memoryfile (aliased `alias`), '' when unfiltered."""
        clauses, params = [], []
        if self.sources:
            clauses.append(f"{alias}.source = ANY(%s)")
            params.append(list(self.sources))
        if self.path_prefix:
            clauses.append(f"starts_with({alias}.path, %s)")
            params.append(self.path_prefix)
        if self.modified_since is not None:
            clauses.append(f"COALESCE({alias}.client_mtime, {alias}.updated_at) >= %s")
            params.append(self.modified_since)
        if self.modified_until is not None:
            clauses.append(f"COALESCE({alias}.client_mtime, {alias}.updated_at) <= %s")
            params.append(self.modified_until)
        if self.attributes is not None:
            clause, attribute_params = self.attributes.sql(f"{alias}.attributes")
            clauses.append(clause)
            params += attribute_params
        return " AND ".join(clauses), params

    @property
    def is_empty(self) -> bool:
        return not (
            self.sources or self.path_prefix or self.modified_since or self.modified_until or self.attributes is not None
        )


@dataclass
class SearchResult:
    path: str
    start_line: int  # 1-indexed; exactly the lines `snippet` shows
    end_line: int
    score: float
    snippet: str
    source: str
    explain: dict | None = None  # vector/keyword rank and score when explain=True
    attributes: dict = field(default_factory=dict)  # the file's attributes
    owner: str | None = None  # the owner agent's slug for a result from a granted memory; None for its own


@dataclass
class SearchResponse:
    results: list[SearchResult] = field(default_factory=list)
    mode: str = "hybrid"  # the mode actually used ("keyword" when the agent has no vectors)
    pending: int = 0  # files accepted but not yet searchable
    took_ms: float = 0.0
    message: str = ""  # plain words for the empty or degraded cases
