"""Input fields every JSON endpoint and tool shares: strict types, and dates within a sane range.

DRF's own fields coerce (``CharField`` turns 42 into "42", ``IntegerField`` takes True and "7"); a
client that sends the wrong type has a bug worth reporting, so these refuse instead. Dates are the
other trap: Postgres stores years up to 294276, Python reads only up to 9999, so a timestamp such as
``9999-12-31T23:59:59-14:00`` (year 10000 in UTC) could be stored and then never read back. Every
client-supplied date goes through ``client_datetime``, which keeps it inside ``DATE_MIN``..``DATE_MAX``
(the same bounds as the database check on ``MemoryFile.client_mtime``).
"""

import math
import re
from datetime import datetime, timedelta, timezone

from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

DATE_MIN = datetime(1900, 1, 1, tzinfo=timezone.utc)
DATE_MAX = datetime(2200, 1, 1, tzinfo=timezone.utc)
# ISO 8601 allows offsets of up to ±14:00 in practice (Pacific/Kiritimati); anything beyond is a typo.
MAX_UTC_OFFSET = timedelta(hours=14)
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)$")


def client_datetime(value) -> datetime:
    """An aware UTC datetime from ISO 8601 text or Unix seconds (number or numeric text), or ValueError
    with a message for the client. Naive ISO times are taken as UTC."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError("must be an ISO 8601 date-time or Unix seconds")
    if isinstance(value, str) and _NUMBER.match(value.strip()):
        value = float(value)
    if isinstance(value, (int, float)):
        seconds = float(value)
        if not math.isfinite(seconds) or not DATE_MIN.timestamp() <= seconds < DATE_MAX.timestamp():
            raise ValueError(f"must be between {DATE_MIN.timestamp():.0f} and {DATE_MAX.timestamp():.0f} Unix seconds")
        return datetime.fromtimestamp(seconds, tz=timezone.utc)
    try:
        parsed = parse_datetime(value.strip())
    except ValueError:  # well formed but impossible: year 0, month 13, an offset of 25 hours
        parsed = None
    if parsed is None:
        raise ValueError("must be an ISO 8601 date-time or Unix seconds")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    elif abs(parsed.utcoffset()) > MAX_UTC_OFFSET:
        raise ValueError("has a UTC offset beyond ±14:00")
    try:
        parsed = parsed.astimezone(timezone.utc)
    except OverflowError:  # 9999-12-31T23:59:59-14:00 is in year 10000 in UTC
        parsed = None
    if parsed is None or not DATE_MIN <= parsed < DATE_MAX:
        raise ValueError(f"must be between {DATE_MIN:%Y-%m-%d} and {DATE_MAX:%Y-%m-%d} (UTC)")
    return parsed


class ClientDatetimeField(serializers.Field):
    """A client's date-time (a file's mtime, a search date filter): ISO 8601 or Unix seconds, in range."""

    def to_internal_value(self, value):
        try:
            return client_datetime(value)
        except ValueError as exc:
            raise serializers.ValidationError(f"{self.field_name} {exc}.", code="invalid") from None

    def to_representation(self, value):
        return value.isoformat() if value else None


class StrictCharField(serializers.CharField):
    """A JSON string, never a number or a list turned into one."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON number that is whole: 5.0 is fine; True, "5" and 5.5 are mistakes worth reporting."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or isinstance(data, str) or (isinstance(data, float) and not data.is_integer()):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    def to_internal_value(self, data):
        if isinstance(data, (bool, str)):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """JSON true or false, not "yes", 1 or "on"."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictSerializer(serializers.Serializer):
    """A serializer that refuses fields it does not know (400 invalid_request naming them): a typo such
    as ``"filter"`` for ``"filters"`` would otherwise be ignored, and the client would never know its
    request was not the one it meant."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(key for key in data if key not in self.fields)
            if unknown:
                raise serializers.ValidationError(
                    {key: [f"Unknown field; this object takes {', '.join(self.fields)}."] for key in unknown}
                )
        return super().to_internal_value(data)


@extend_schema_field(
    {"type": "object", "maxProperties": 16, "additionalProperties": {"type": ["string", "number", "boolean"]}}
)
class AttributesField(serializers.Field):
    """A file's attributes: at most 16 keys with string, number or boolean values (indexing/attributes.py)."""

    def to_internal_value(self, value):
        from indexing.attributes import InvalidAttributes, attributes_clean

        try:
            return attributes_clean(value, field=self.field_name)
        except InvalidAttributes as exc:
            raise serializers.ValidationError(str(exc)) from None

    def to_representation(self, value):
        return value


@extend_schema_field(
    {
        "type": "object",
        "description": "{type: eq|ne|gt|gte|lt|lte|in|nin, key, value} or {type: and|or, filters: [...]}",
        "properties": {
            "type": {"type": "string", "enum": ["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "and", "or"]},
            "key": {"type": "string"},
            "value": {"type": ["string", "number", "boolean", "array"]},
            "filters": {"type": "array", "items": {"type": "object"}},
        },
        "required": ["type"],
    }
)
class AttributeFilterField(serializers.Field):
    """Search filters on attributes: comparison and compound filters (indexing/attributes.py)."""

    def to_internal_value(self, value):
        from indexing.attributes import AttributeFilter, InvalidAttributes

        try:
            return AttributeFilter.parse(value, field=self.field_name)
        except InvalidAttributes as exc:
            raise serializers.ValidationError(str(exc)) from None

    def to_representation(self, value):
        return value.to_json()


@extend_schema_field(
    {"oneOf": [{"type": "string", "enum": ["own", "shared"]}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]}
)
class ScopeField(serializers.Field):
    """memory_search's scope: "own" (default), "shared", or a list of memory names (agent slugs)."""

    default_error_messages = {"invalid": 'Must be "own", "shared" or a list of memory names (agent slugs).'}

    def to_internal_value(self, value):
        if value in ("own", "shared"):
            return value
        if isinstance(value, list) and value and all(isinstance(name, str) and name for name in value):
            return value
        self.fail("invalid")

    def to_representation(self, value):
        return value
