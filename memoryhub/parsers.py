"""JSON request bodies with a bounded nesting depth, for the REST API and the MCP endpoint alike.

Python's decoder recurses once per level: a body of 100,000 ``[`` raises RecursionError deep inside
the parser, which used to surface as a 500. No MemoryHub request needs more than a handful of levels
(a search filter nests a few), so anything deeper than ``MAX_JSON_DEPTH`` is refused as a bad request.
"""

import json
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

MAX_JSON_DEPTH = 64


class JsonTooDeep(ValueError):
    pass


def json_depth_check(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """JsonTooDeep when ``value`` nests lists and objects more than ``max_depth`` levels (iterative)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > max_depth:
            raise JsonTooDeep(f"The JSON body nests more than {max_depth} levels deep.")
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def json_loads_bounded(raw: bytes | str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Strict ``json.loads`` (no NaN or Infinity) that raises ValueError, JsonTooDeep for nesting,
    instead of RecursionError."""
    try:
        value = json.loads(raw, parse_constant=_refuse_constant)
    except RecursionError:
        raise JsonTooDeep(f"The JSON body nests more than {max_depth} levels deep.") from None
    json_depth_check(value, max_depth=max_depth)
    return value


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser, with the nesting bound above (400 invalid_request past it)."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            raw = stream.read() if stream is not None else b""
            return json_loads_bounded(raw)
        except JsonTooDeep as exc:
            raise ParseError(str(exc)) from None
        except ValueError as exc:  # also UnicodeDecodeError
            raise ParseError(f"JSON parse error - {exc}") from None
