"""What the retrievers keep of a search result: its citation and metadata, the same in every framework."""

from __future__ import annotations

from typing import Any


def citation(result: dict) -> str:
    """``memory/2026-03-01.md#L3-L4``: the form the memory tools cite in."""
    return f"{result['path']}#L{result['start_line']}-L{result['end_line']}"


def result_metadata(result: dict) -> dict[str, Any]:
    return {
        "path": result["path"], "start_line": result["start_line"], "end_line": result["end_line"],
        "score": result["score"], "source": result["source"], "attributes": result.get("attributes") or {},
        "citation": citation(result),
    }
