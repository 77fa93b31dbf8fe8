"""The agent tools: memory_search and memory_get read, memory_write, memory_append and memory_delete
write (only for a token with the write scope). One definition, four wire formats, one runner.

The definitions use the argument names of common agent frameworks' memory tools (``query``,
``maxResults``, ``minScore``; ``path``, ``from``, ``lines``) because that is what models trained on those
agents emit; ``max_results`` and
``min_score`` are accepted as well. ``tool_run`` is what both ``POST /api/v1/tools/<name>`` and the MCP
endpoint call, so a model sees the same text whichever way it reaches MemoryHub.
"""

from dataclasses import dataclass
from typing import Any, Callable

from django.conf import settings
from rest_framework import serializers

from agents.models import Agent
from indexing.models import MemoryFile
from indexing.paths import path_normalize, prefix_normalize
from indexing.selectors import (
    MEMORY_GET_DEFAULT_LINES,
    MEMORY_GET_MAX_FROM,
    MEMORY_GET_MAX_LINES,
    agent_index_status,
    file_read_lines,
)
from indexing.writes import file_delete, file_ingest, hash_normalize
from memoryhub.domain import Forbidden, InvalidInput, NotFound
from memoryhub.errors import CLIENT_ERRORS, error_message
from memoryhub.fields import (
    AttributeFilterField,
    AttributesField,
    ClientDatetimeField,
    ScopeField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
)
from search.services import memory_search
from search.types import SearchFilters

TOOL_FORMATS = ("openai", "anthropic", "mcp", "responses")

MEMORY_SEARCH_DESCRIPTION = (
    "Search your long-term memory (MEMORY.md, daily notes in memory/, past conversation transcripts and "
    "workspace notes) before answering anything about prior work, decisions, dates, people, preferences "
    "or to-dos. Returns a few short snippets, each cited as path#Lstart-Lend; use memory_get to read "
    "more lines around a snippet."
)
MEMORY_GET_DESCRIPTION = (
    "Read lines of one memory file, e.g. to expand a memory_search snippet cited as path#Lstart-Lend: "
    "pass path and from=start. Returns at most `lines` lines (default 50)."
)

MEMORY_WRITE_DESCRIPTION = (
    "Save a memory file, replacing it if it exists: durable facts, decisions, preferences, to-dos. A bare "
    "name like notes.md is stored as memory/notes.md. Pass expected_hash (the hash you last saw) to avoid "
    "overwriting someone else's change. Returns the new hash; the text is searchable once pending is 0."
)
MEMORY_APPEND_DESCRIPTION = (
    "Add lines to the end of a memory file (a note, or new JSONL lines of a transcript), creating it when "
    "absent. Send only the new text. Returns the new hash."
)
MEMORY_DELETE_DESCRIPTION = "Forget a memory file: it is removed from search at once. Returns what was removed."
_EXPECTED_HASH = {
    "type": "string",
    "description": "Write only if the file's current hash is this one (\"\" = only if it does not exist yet).",
}

_ATTRIBUTES = {
    "type": "object",
    "description": "Up to 16 labels for the file, e.g. {\"project\": \"falcon\", \"priority\": 2}: string, number or "
    "boolean values. memory_search can filter on them. Left out, the file keeps the ones it has.",
    "additionalProperties": {"type": ["string", "number", "boolean"]},
}
_FILTER_TYPES = ["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "and", "or"]
_SEARCH_FILTERS = {
    "sources": {
        "type": "array",
        "items": {"type": "string", "enum": ["memory", "session", "workspace"]},
        "description": "Only these kinds of file: memory (MEMORY.md, memory/), session (transcripts), workspace.",
    },
    "path_prefix": {"type": "string", "description": "Only files whose path starts with this, e.g. memory/2026-03 or projects/."},
    "modified_since": {"type": "string", "description": "Only files modified at or after this ISO 8601 date-time."},
    "modified_until": {"type": "string", "description": "Only files modified at or before this ISO 8601 date-time."},
    "filters": {
        "type": "object",
        "description": "Only files whose attributes match: {\"type\": \"eq\", \"key\": \"project\", \"value\": \"falcon\"} "
        "(eq ne gt gte lt lte in nin; in/nin take a list), or {\"type\": \"and\"|\"or\", \"filters\": [...]}.",
        "properties": {
            "type": {"type": "string", "enum": _FILTER_TYPES},
            "key": {"type": "string"},
            "value": {"type": ["string", "number", "boolean", "array"]},
            "filters": {"type": "array", "items": {"type": "object"}},
        },
        "required": ["type"],
    },
}

TOOL_SCHEMAS: dict[str, dict] = {
    "memory_search": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for, in natural language."},
            "maxResults": {
                "type": "integer",
                "minimum": 1,
                "maximum": settings.MEMORYHUB_SEARCH_MAX_RESULTS_LIMIT,
                "description": "Most snippets to return (default 6).",
            },
            "minScore": {
                "type": "number",
                "minimum": 0,
                "maximum": 1,
                "description": "Drop results scoring below this (0-1; the server's default keeps exact keyword matches).",
            },
            **_SEARCH_FILTERS,
            "scope": {
                "type": ["string", "array"],
                "items": {"type": "string"},
                "description": "Whose memory: \"own\" (default), \"shared\" (yours and the memories shared with you), "
                "or a list of memory names. Results from a shared memory are cited as owner:path#Lstart-Lend.",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    "memory_get": {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "File path as cited by memory_search, e.g. memory/2026-03-01.md, or owner:path for a "
                "shared memory (handbook:memory/policies.md).",
            },
            "from": {
                "type": "integer",
                "minimum": 1,
                "maximum": MEMORY_GET_MAX_FROM,
                "description": "First line to read, 1-indexed (default 1).",
            },
            "lines": {
                "type": "integer",
                "minimum": 1,
                "maximum": MEMORY_GET_MAX_LINES,
                "description": "How many lines to read (default 50).",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    "memory_write": {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Where to save it, e.g. memory/project-falcon.md (a bare name goes under memory/)."},
            "content": {"type": "string", "description": "The whole new text of the file."},
            "attributes": _ATTRIBUTES,
            "expected_hash": _EXPECTED_HASH,
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    },
    "memory_append": {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "The file to extend, e.g. memory/2026-03-01.md (a bare name goes under memory/)."},
            "text": {"type": "string", "description": "Only the new lines; they start on a new line."},
            "attributes": _ATTRIBUTES,
            "expected_hash": _EXPECTED_HASH,
        },
        "required": ["path", "text"],
        "additionalProperties": False,
    },
    "memory_delete": {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "The file to forget, as cited by memory_search."},
            "expected_hash": _EXPECTED_HASH,
        },
        "required": ["path"],
        "additionalProperties": False,
    },
}
TOOL_DESCRIPTIONS = {
    "memory_search": MEMORY_SEARCH_DESCRIPTION,
    "memory_get": MEMORY_GET_DESCRIPTION,
    "memory_write": MEMORY_WRITE_DESCRIPTION,
    "memory_append": MEMORY_APPEND_DESCRIPTION,
    "memory_delete": MEMORY_DELETE_DESCRIPTION,
}
TOOL_TITLES = {
    "memory_search": "Search memory",
    "memory_get": "Read memory file lines",
    "memory_write": "Save a memory file",
    "memory_append": "Append to a memory file",
    "memory_delete": "Forget a memory file",
}
TOOL_NAMES = tuple(TOOL_SCHEMAS)
READ_TOOLS = ("memory_search", "memory_get")
WRITE_TOOLS = ("memory_write", "memory_append", "memory_delete")
# MCP hints: the read tools may run without asking the user; memory_write replaces a file and
# memory_delete removes one (destructive), memory_append only adds to one.
_MCP_HINTS = {
    "memory_search": {"readOnlyHint": True},
    "memory_get": {"readOnlyHint": True},
    "memory_write": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True},
    "memory_append": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False},
    "memory_delete": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True},
}


def tool_names(*, can_write: bool) -> tuple[str, ...]:
    """The tools a token may see and call: the write tools need the write scope."""
    return TOOL_NAMES if can_write else READ_TOOLS


def tool_definitions(*, format: str, can_write: bool = False) -> list[dict]:
    """The tools in one framework's shape: OpenAI chat-completions functions, Anthropic tools, MCP tools,
    OpenAI Responses API functions."""
    definitions = []
    for name in tool_names(can_write=can_write):
        description, schema = TOOL_DESCRIPTIONS[name], TOOL_SCHEMAS[name]
        if format == "openai":
            definitions.append({"type": "function", "function": {"name": name, "description": description, "parameters": schema}})
        elif format == "responses":
            definitions.append({"type": "function", "name": name, "description": description, "parameters": schema})
        elif format == "anthropic":
            definitions.append({"name": name, "description": description, "input_schema": schema})
        elif format == "mcp":
            annotations = {"title": TOOL_TITLES[name], **_MCP_HINTS[name], "openWorldHint": False}
            definitions.append({"name": name, "description": description, "inputSchema": schema, "annotations": annotations})
        else:
            raise InvalidInput(f"format must be one of {', '.join(TOOL_FORMATS)}.", code="invalid_request")
    return definitions


@dataclass
class ToolOutput:
    content: str  # what the model reads, with path#Lstart-Lend citations
    data: dict  # the same answer as structured JSON


class UnknownTool(NotFound):
    def __init__(self, name: str):
        super().__init__(f"No tool {name!r}; the tools are {', '.join(TOOL_NAMES)}.", code="unknown_tool")


def _invalid_arguments(message: str) -> InvalidInput:
    return InvalidInput(message, code="invalid_arguments")


class MemorySearchArguments(serializers.Serializer):
    query = StrictCharField(trim_whitespace=False, allow_blank=True)
    maxResults = StrictIntegerField(min_value=1, required=False, allow_null=True)
    minScore = StrictFloatField(min_value=0, max_value=1, required=False, allow_null=True)
    sources = serializers.ListField(child=serializers.ChoiceField(choices=MemoryFile.Source.values), required=False, allow_null=True)
    path_prefix = StrictCharField(required=False, allow_null=True, allow_blank=True, trim_whitespace=False)
    modified_since = ClientDatetimeField(required=False, allow_null=True)
    modified_until = ClientDatetimeField(required=False, allow_null=True)
    filters = AttributeFilterField(required=False, allow_null=True)
    scope = ScopeField(required=False, allow_null=True)

    def validate_maxResults(self, value):
        # The same limit as POST search, read when the call is made (settings may change between runs).
        limit = settings.MEMORYHUB_SEARCH_MAX_RESULTS_LIMIT
        if value is not None and value > limit:
            raise serializers.ValidationError(f"Ensure this value is less than or equal to {limit}.")
        return value


class MemoryGetArguments(serializers.Serializer):
    path = StrictCharField(trim_whitespace=False)
    start = StrictIntegerField(min_value=1, max_value=MEMORY_GET_MAX_FROM, required=False, allow_null=True)  # the tool's "from"
    lines = StrictIntegerField(min_value=1, max_value=MEMORY_GET_MAX_LINES, required=False, allow_null=True)


class ExpectedHashField(serializers.Field):
    """A tool's expected_hash: the file's SHA-256 (``sha256:`` prefix allowed), or "" for "no file yet"."""

    default_error_messages = {"invalid": "must be a string: the file's hash, or \"\" if it should not exist yet."}

    def to_internal_value(self, value):
        if not isinstance(value, str):
            self.fail("invalid")
        if value.strip() == "":
            return ""
        try:
            return hash_normalize(value)
        except CLIENT_ERRORS as exc:
            raise serializers.ValidationError(error_message(exc)) from None


class MemoryWriteArguments(serializers.Serializer):
    path = StrictCharField(trim_whitespace=False)
    content = StrictCharField(trim_whitespace=False, allow_blank=True)
    attributes = AttributesField(required=False, allow_null=True)
    expected_hash = ExpectedHashField(required=False, allow_null=True)


class MemoryAppendArguments(serializers.Serializer):
    path = StrictCharField(trim_whitespace=False)
    text = StrictCharField(trim_whitespace=False, allow_blank=True)
    attributes = AttributesField(required=False, allow_null=True)
    expected_hash = ExpectedHashField(required=False, allow_null=True)


class MemoryDeleteArguments(serializers.Serializer):
    path = StrictCharField(trim_whitespace=False)
    expected_hash = ExpectedHashField(required=False, allow_null=True)


# Snake-case spellings some frameworks produce; mapped onto the tool's own names.
_ALIASES = {
    "memory_search": {
        "max_results": "maxResults", "min_score": "minScore", "pathPrefix": "path_prefix",
        "modifiedSince": "modified_since", "modifiedUntil": "modified_until",
    },
    "memory_get": {"from": "start", "start_line": "start"},
    "memory_write": {},
    "memory_append": {},
    "memory_delete": {},
}


def _validated(name: str, serializer_class, arguments: Any) -> dict:
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise _invalid_arguments(f"The arguments of {name} must be a JSON object.")
    aliases = _ALIASES[name]
    known = set(TOOL_SCHEMAS[name]["properties"]) | set(aliases)
    unknown = sorted(key for key in arguments if key not in known)
    if unknown:
        raise _invalid_arguments(
            f"{name} has no argument {', '.join(map(repr, unknown))}; it takes {', '.join(TOOL_SCHEMAS[name]['properties'])}."
        )
    renamed = {aliases.get(key, key): value for key, value in arguments.items()}
    serializer = serializer_class(data=renamed)
    if not serializer.is_valid():
        outside = {value: key for key, value in aliases.items() if key in arguments}
        outside.setdefault("start", "from")
        parts = []
        for field, errors in serializer.errors.items():
            parts.append(f"{outside.get(field, field)}: {' '.join(str(error) for error in errors)}")
        raise _invalid_arguments(f"Invalid arguments for {name}: {'; '.join(parts)}")
    return {key: value for key, value in serializer.validated_data.items() if value is not None}


def _citation(path: str, start: int, end: int, owner: str | None = None) -> str:
    """path#Lstart-Lend; a granted memory's file is prefixed with its owner (handbook:memory/x.md#L3-L9)."""
    cited = f"{owner}:{path}" if owner else path
    return f"{cited}#L{start}-L{end}" if end != start else f"{cited}#L{start}"


def memory_search_run(*, agent: Agent, arguments: Any) -> ToolOutput:
    args = _validated("memory_search", MemorySearchArguments, arguments)
    filters = SearchFilters(
        sources=tuple(dict.fromkeys(args.get("sources") or ())),
        path_prefix=prefix_normalize(args.get("path_prefix")),
        modified_since=args.get("modified_since"),
        modified_until=args.get("modified_until"),
        attributes=args.get("filters"),
    )
    response = memory_search(
        agent=agent, query=args["query"], max_results=args.get("maxResults"), min_score=args.get("minScore"), filters=filters,
        scope=args.get("scope"),
    )
    results = []
    for result in response.results:
        item = {
            "path": result.path,
            "start_line": result.start_line,
            "end_line": result.end_line,
            "score": result.score,
            "snippet": result.snippet,
            "source": result.source,
            "attributes": result.attributes,
            "citation": _citation(result.path, result.start_line, result.end_line, result.owner),
        }
        if result.owner is not None:
            item["owner"] = result.owner
        results.append(item)
    data = {
        "results": results,
        "mode": response.mode,
        "pending": response.pending,
        "took_ms": response.took_ms,
        "message": response.message,
    }
    lines = []
    if results:
        lines.append(f"{len(results)} memory snippet{'s' if len(results) != 1 else ''} for {args['query']!r}:")
        for number, result in enumerate(results, 1):
            lines.append("")
            lines.append(f"[{number}] {result['citation']} (score {result['score']:.2f}, {result['source']})")
            lines.append(result["snippet"])
    else:
        lines.append(response.message or f"No memory matched {args['query']!r}.")
    # The service's message says in words what the model must know: nothing matched, keyword-only
    # fallback, files still being indexed.
    if results and response.message:
        lines += ["", response.message]
    elif response.pending and not response.message:
        lines += ["", f"Note: {response.pending} file(s) are still being indexed; the newest memories may be missing."]
    return ToolOutput(content="\n".join(lines), data=data)


def memory_get_run(*, agent: Agent, arguments: Any) -> ToolOutput:
    from agents.selectors import memory_path_resolve

    args = _validated("memory_get", MemoryGetArguments, arguments)
    owner, memory, path = memory_path_resolve(reader=agent, path=args["path"])  # owner:path reads a granted memory
    path = path_normalize(path)
    start, count = args.get("start", 1), args.get("lines", MEMORY_GET_DEFAULT_LINES)
    result = file_read_lines(agent=memory, path=path, start=start, lines=count)
    data = {key: result[key] for key in ("path", "from", "lines", "total_lines", "content", "source")}
    if owner is not None:
        data["owner"] = owner
    total = result["total_lines"]
    if result["lines"] == 0:
        content = (
            f"{result['path']} is empty."
            if total == 0
            else f"{result['path']} has {total} line{'s' if total != 1 else ''}; there is nothing from line {start}."
        )
        return ToolOutput(content=content, data=data)
    end = start + result["lines"] - 1
    header = f"{_citation(result['path'], start, end, owner)} (lines {start}-{end} of {total})"
    footer = ""
    if end < total:
        footer = f"\n[{total - end} more line{'s' if total - end != 1 else ''}: memory_get with from={end + 1}]"
    return ToolOutput(content=f"{header}\n{result['content']}{footer}", data=data)


def _write_path(raw: str) -> str:
    """A model often says just "falcon.md": notes it writes live under memory/, MEMORY.md at the root."""
    path = path_normalize(raw)
    if "/" not in path and path.lower() != "memory.md":
        path = f"memory/{path}"
    return path


def _written(*, agent: Agent, action: str, memory_file, job) -> ToolOutput:
    pending = agent_index_status(agent=agent)["pending"]
    data = {
        "path": memory_file.path,
        "action": action if job is not None else "unchanged",
        "hash": memory_file.content_hash,
        "size": memory_file.size,
        "job": job.id if job is not None else None,
        "pending": pending,
        "attributes": memory_file.attributes,
    }
    if job is None:
        content = f"{memory_file.path} already had this content (hash {memory_file.content_hash}); nothing changed."
    else:
        content = f"{memory_file.path} {action} ({memory_file.size} bytes, hash {memory_file.content_hash})."
    if pending:
        content += f" {pending} file(s) are being indexed; memory_search finds the new text once pending is 0."
    return ToolOutput(content=content, data=data)


def memory_write_run(*, agent: Agent, arguments: Any) -> ToolOutput:
    args = _validated("memory_write", MemoryWriteArguments, arguments)
    memory_file, job = file_ingest(
        agent=agent, path=_write_path(args["path"]), content=args["content"], attributes=args.get("attributes"),
        expected_hash=args.get("expected_hash"),
    )
    return _written(agent=agent, action="created" if memory_file.was_created else "replaced", memory_file=memory_file, job=job)


def memory_append_run(*, agent: Agent, arguments: Any) -> ToolOutput:
    args = _validated("memory_append", MemoryAppendArguments, arguments)
    memory_file, job = file_ingest(
        agent=agent, path=_write_path(args["path"]), append=args["text"], attributes=args.get("attributes"),
        expected_hash=args.get("expected_hash"),
    )
    return _written(agent=agent, action="created" if memory_file.was_created else "appended", memory_file=memory_file, job=job)


def memory_delete_run(*, agent: Agent, arguments: Any) -> ToolOutput:
    args = _validated("memory_delete", MemoryDeleteArguments, arguments)
    path = path_normalize(args["path"])
    job = file_delete(agent=agent, path=path, expected_hash=args.get("expected_hash"))
    data = {"path": path, "action": "deleted", "hash": None, "chunks_removed": job.chunks_removed, "job": job.id, "pending": 0}
    return ToolOutput(content=f"{path} deleted; it no longer appears in memory_search.", data=data)


TOOL_RUNNERS: dict[str, Callable[..., ToolOutput]] = {
    "memory_search": memory_search_run,
    "memory_get": memory_get_run,
    "memory_write": memory_write_run,
    "memory_append": memory_append_run,
    "memory_delete": memory_delete_run,
}


def tool_run(*, agent: Agent, name: str, arguments: Any, can_write: bool = False) -> ToolOutput:
    """Run one tool for this agent with the arguments the model produced.

    Raises domain errors (memoryhub/domain.py): NotFound ``unknown_tool``, Forbidden ``insufficient_scope``
    (a write tool without the write scope), InvalidInput ``invalid_arguments``, PreconditionFailed
    ``hash_mismatch``, or the tool's own (a bad path, a file that does not exist)."""
    runner = TOOL_RUNNERS.get(name)
    if runner is None:
        raise UnknownTool(name)
    if name not in tool_names(can_write=can_write):
        raise Forbidden(f"{name} needs a token with the 'write' scope.", code="insufficient_scope")
    return runner(agent=agent, arguments=arguments)
