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
