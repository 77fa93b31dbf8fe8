"""Signed writes for agents with a webhook secret.

When ``Agent.webhook_secret`` is set, every request that writes (PUT and DELETE of files, sync, and any
other write-scoped call) must carry

    X-MemoryHub-Signature: t=<Unix seconds>,v1=<hex HMAC-SHA256>

where the HMAC, keyed with the secret, covers ``"<t>.<METHOD>.<path>[?<query>]\\n"`` followed by the
raw body. ``path`` is the request path as sent, percent-decoded (``/api/v1/files/memory/a b.md``);
``query`` is the query string exactly as sent. Binding the method and path means a signature for one
write cannot be spent on another; binding the timestamp means a captured request is refused once it is
older (or newer) than the tolerance, ``MEMORYHUB_WEBHOOK_TOLERANCE_SECONDS`` (5 minutes, as Stripe and
Slack allow). The token still decides the agent: a signature only proves the sender holds the secret.
"""

import hashlib
import hmac
import re
import time

SIGNATURE_HEADER = "X-MemoryHub-Signature"
_HEADER = re.compile(r"^t=(\d{1,12}),v1=([0-9a-fA-F]{64})$")


class SignatureError(Exception):
    """The request is unsigned, badly signed, or signed too long ago (the message says which)."""


def signature_payload(*, timestamp: int, method: str, path: str, query: str, body: bytes) -> bytes:
    target = path + (f"?{query}" if query else "")
    return f"{timestamp}.{method.upper()}.{target}\n".encode("utf-8") + body


def signature_header(*, secret: str, method: str, path: str, query: str = "", body: bytes = b"", timestamp: int | None = None) -> str:
    """The header value a client sends (also what the tests and the sync client use)."""
    timestamp = int(time.time()) if timestamp is None else timestamp
    payload = signature_payload(timestamp=timestamp, method=method, path=path, query=query, body=body)
    digest = hmac.new(secret.encode("utf-8"), payload, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def signature_verify(
    *, secret: str, header: str, method: str, path: str, query: str, body: bytes, tolerance: int, now: float | None = None
) -> None:
    match = _HEADER.match((header or "").strip())
    if match is None:
        raise SignatureError(
            f"This agent signs its writes: send {SIGNATURE_HEADER}: t=<Unix seconds>,v1=<hex HMAC-SHA256 of "
            "'<t>.<METHOD>.<path>[?<query>]\\n' + body, keyed with the webhook secret>."
        )
    timestamp, given = int(match.group(1)), match.group(2).lower()
    now = time.time() if now is None else now
    if abs(now - timestamp) > tolerance:
        raise SignatureError(
            f"The signature's timestamp is {abs(now - timestamp):.0f} s away from the server's clock; "
            f"it must be within {tolerance} s (sign each request when it is sent)."
        )
    payload = signature_payload(timestamp=timestamp, method=method, path=path, query=query, body=body)
    expected = hmac.new(secret.encode("utf-8"), payload, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise SignatureError("The signature does not match this request (method, path, query, body and timestamp).")
