"""File attributes: a few user-set key/value pairs on a memory file, and the filters search takes on them.

Attributes are the file's metadata, not its text: setting them never re-indexes the file, and search
reads them from the file row when it filters. The filter shape is the one OpenAI's vector-store search
uses, so an agent written for that API filters here unchanged:

    {"type": "eq", "key": "project", "value": "apollo"}                 # eq ne gt gte lt lte in nin
    {"type": "and", "filters": [{...}, {"type": "or", "filters": [...]}]}

Comparison semantics (documented in docs/api.md, "Attributes"):
- ``eq``/``in`` match only files that have the key with an equal value (JSON equality: 1 equals 1.0,
  "1" does not equal 1, true is not 1);
- ``ne``/``nin`` match files whose value differs, including files without the key;
- ``gt``/``gte``/``lt``/``lte`` compare numbers with numbers and strings with strings (by code point);
  a file whose value has the other type, or no value, does not match.

Keys reach SQL only as bound parameters, values as JSON parameters: no attribute can inject SQL.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

MAX_KEYS = 16
MAX_KEY_CHARS = 64
MAX_STRING_CHARS = 512
KEY_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
# A filter is a small tree: enough for real questions, bounded for the planner.
MAX_FILTER_NODES = 32
MAX_FILTER_DEPTH = 4
MAX_IN_VALUES = 100

COMPARISONS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin")
COMPOUNDS = ("and", "or")
_ORDER_OPERATORS = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


class InvalidAttributes(ValueError):
    """Bad attributes or a bad filter; the message names the field (the API answers 400)."""


def _scalar(value, *, where: str):
    """A valid attribute value (str, finite number, bool), or InvalidAttributes."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidAttributes(f"{where}: numbers must be finite.")
        if isinstance(value, int) and abs(value) > 2**53:
            raise InvalidAttributes(f"{where}: integers must be within ±2^53.")
        return value
    if isinstance(value, str):
        if len(value) > MAX_STRING_CHARS:
            raise InvalidAttributes(f"{where}: strings are at most {MAX_STRING_CHARS} characters.")
        if "\x00" in value:
            raise InvalidAttributes(f"{where}: strings may not contain NUL.")
        return value
    raise InvalidAttributes(f"{where}: values are strings, numbers or booleans, not {type(value).__name__}.")


def _key(key, *, where: str) -> str:
    if not isinstance(key, str) or not key:
        raise InvalidAttributes(f"{where}: keys are non-empty strings.")
    if len(key) > MAX_KEY_CHARS or not KEY_PATTERN.match(key):
        raise InvalidAttributes(
            f"{where}: {key[:80]!r} is not a valid key (at most {MAX_KEY_CHARS} of A-Z a-z 0-9 _ . -, not starting with . or -)."
        )
    return key


def attributes_clean(value, *, field: str = "attributes") -> dict:
    """The attributes as stored: a JSON object of at most MAX_KEYS valid keys with scalar values."""
    if not isinstance(value, dict):
        raise InvalidAttributes(f"{field}: must be a JSON object of key/value pairs.")
    if len(value) > MAX_KEYS:
        raise InvalidAttributes(f"{field}: at most {MAX_KEYS} keys (got {len(value)}).")
    return {_key(key, where=field): _scalar(item, where=f"{field}.{key}") for key, item in value.items()}


@dataclass(frozen=True)
class AttributeFilter:
    """A validated filter tree: a comparison (``key``, ``value``) or a compound (``filters``)."""

    type: str
    key: str = ""
    value: object = None
    filters: tuple[AttributeFilter, ...] = ()

    @classmethod
    def parse(cls, raw, *, field: str = "filters") -> AttributeFilter:
        nodes = [0]
        return cls._parse(raw, field=field, depth=1, nodes=nodes)

    @classmethod
    def _parse(cls, raw, *, field: str, depth: int, nodes: list[int]) -> AttributeFilter:
        nodes[0] += 1
        if nodes[0] > MAX_FILTER_NODES:
            raise InvalidAttributes(f"{field}: at most {MAX_FILTER_NODES} filters in all.")
        if depth > MAX_FILTER_DEPTH:
            raise InvalidAttributes(f"{field}: compound filters nest at most {MAX_FILTER_DEPTH} deep.")
        if not isinstance(raw, dict):
            raise InvalidAttributes(f"{field}: a filter is a JSON object with a 'type'.")
        kind = raw.get("type")
        if kind in COMPOUNDS:
            unknown = sorted(set(raw) - {"type", "filters"})
            if unknown:
                raise InvalidAttributes(f"{field}: unknown field {unknown[0]!r} in an {kind!r} filter.")
            children = raw.get("filters")
            if not isinstance(children, list) or not children:
                raise InvalidAttributes(f"{field}.filters: an {kind!r} filter needs a non-empty list of filters.")
            return cls(
                type=kind,
                filters=tuple(
                    cls._parse(child, field=f"{field}.filters[{i}]", depth=depth + 1, nodes=nodes)
                    for i, child in enumerate(children)
                ),
            )
        if kind in COMPARISONS:
            unknown = sorted(set(raw) - {"type", "key", "value"})
            if unknown:
                raise InvalidAttributes(f"{field}: unknown field {unknown[0]!r} in a {kind!r} filter.")
            key = _key(raw.get("key"), where=f"{field}.key")
            if "value" not in raw:
                raise InvalidAttributes(f"{field}.value: a {kind!r} filter needs a value.")
            value = raw["value"]
            if kind in ("in", "nin"):
                if not isinstance(value, list) or not value or len(value) > MAX_IN_VALUES:
                    raise InvalidAttributes(f"{field}.value: {kind!r} takes a list of 1 to {MAX_IN_VALUES} values.")
                value = tuple(_scalar(item, where=f"{field}.value[{i}]") for i, item in enumerate(value))
            else:
                value = _scalar(value, where=f"{field}.value")
                if kind in _ORDER_OPERATORS and isinstance(value, bool):
                    raise InvalidAttributes(f"{field}.value: {kind!r} compares numbers or strings, not booleans.")
            return cls(type=kind, key=key, value=value)
        raise InvalidAttributes(f"{field}.type: must be one of {', '.join(COMPARISONS + COMPOUNDS)}.")

    def sql(self, column: str) -> tuple[str, list]:
        """A parameterised SQL condition on the jsonb ``column`` (e.g. ``f.attributes``)."""
        if self.type in COMPOUNDS:
            parts = [child.sql(column) for child in self.filters]
            joiner = " AND " if self.type == "and" else " OR "
            return "(" + joiner.join(sql for sql, _ in parts) + ")", [p for _, params in parts for p in params]
        value_of = f"({column} -> %s)"
        if self.type == "eq":
            return f"{value_of} = %s::jsonb", [self.key, json.dumps(self.value)]
        if self.type == "ne":
            return f"{value_of} IS DISTINCT FROM %s::jsonb", [self.key, json.dumps(self.value)]
        if self.type == "in":
            return f"COALESCE({value_of} = ANY(%s::jsonb[]), false)", [self.key, [json.dumps(v) for v in self.value]]
        if self.type == "nin":
            return f"NOT COALESCE({value_of} = ANY(%s::jsonb[]), false)", [self.key, [json.dumps(v) for v in self.value]]
        operator = _ORDER_OPERATORS[self.type]
        if isinstance(self.value, str):
            # CASE, not AND: Postgres does not promise to test the type before it compares.
            return (
                f"CASE WHEN jsonb_typeof({value_of}) = 'string' THEN ({column} ->> %s) COLLATE \"C\" {operator} %s ELSE false END",
                [self.key, self.key, self.value],
            )
        return (
            f"CASE WHEN jsonb_typeof({value_of}) = 'number' THEN ({column} ->> %s)::numeric {operator} %s::numeric ELSE false END",
            [self.key, self.key, self.value],
        )

    def to_json(self) -> dict:
        if self.type in COMPOUNDS:
            return {"type": self.type, "filters": [child.to_json() for child in self.filters]}
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        return {"type": self.type, "key": self.key, "value": value}
