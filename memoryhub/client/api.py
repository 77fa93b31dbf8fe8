"""The MemoryHub API over HTTP with the standard library (urllib), so the client adds no dependency.

Every failure, whether the server answered with an error or never answered, becomes ``ServerError``
with a message a person can act on: the server's own ``{"error": {"code", "message"}}`` when there is
one, else the status line or the network error. The CLI prints it and exits with 1.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

API_PREFIX = "/api/v1/"
SIGNATURE_HEADER = "X-MemoryHub-Signature"
USER_AGENT = "memoryhub-client/0.1"


class ConfigError(Exception):
    """Bad flags or environment: exit code 2."""


class ServerError(Exception):
    """The server refused the request or could not be reached: exit code 1."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.retry_after = retry_after


def write_signature(*, secret: str, method: str, path: str, query: str, body: bytes) -> str:
    """``X-MemoryHub-Signature`` for a write of an agent with a webhook secret: ``t=<Unix seconds>,v1=<hex
    HMAC-SHA256 of "<t>.<METHOD>.<path>[?<query>]\\n" + body>`` (the server's docs/api.md, "Signed writes")."""
    timestamp = int(time.time())
    target = path + (f"?{query}" if query else "")
    message = f"{timestamp}.{method.upper()}.{target}\n".encode("utf-8") + body
    return f"t={timestamp},v1={hmac.new(secret.encode('utf-8'), message, hashlib.sha256).hexdigest()}"


def base_url_parse(raw: str) -> str:
    """The server's root URL from MEMORYHUB_URL / --url; '/api/v1' at the end is tolerated."""
    url = (raw or "").strip().rstrip("/")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"the server URL must look like http://host:port, not {raw!r} (--url or MEMORYHUB_URL)")
    if url.endswith(API_PREFIX.rstrip("/")):
        url = url[: -len(API_PREFIX.rstrip("/"))]
    return url


# Every call the client makes is idempotent (a sync states what the server should hold), so a request
# that met a busy or briefly failing server (429, a deadlock's 500, a proxy's 502-504) is sent again.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
RETRY_DELAYS = (1.0, 3.0)  # seconds before the 2nd and 3rd attempt, unless Retry-After says otherwise
MAX_RETRY_AFTER = 30.0


class ApiClient:
    def __init__(
        self,
        *,
        url: str,
        token: str,
        webhook_secret: str = "",
        timeout: float = 120.0,
        retry_delays: tuple[float, ...] = RETRY_DELAYS,
        on_retry: Callable[[str], None] | None = None,
    ):
        self.root = base_url_parse(url)
        if not token:
            raise ConfigError("no agent token: pass --token or set MEMORYHUB_TOKEN")
        self.token = token
        self.webhook_secret = webhook_secret
        self.timeout = timeout
        self.retry_delays = retry_delays
        self.on_retry = on_retry or (lambda message: None)

    # --- Endpoints -------------------------------------------------------------------------------

    def sync(self, *, files: list[dict], delete_missing: bool = False, prefix: str = "") -> dict:
        body = {"files": files, "delete_missing": delete_missing}
        if prefix:
            body["prefix"] = prefix
        return self.request("POST", "sync", body=body)

    def file_list(self, *, prefix: str = "") -> list[str]:
        """Every path of this agent's files under ``prefix``, following the pagination."""
        paths: list[str] = []
        offset = 0
        while True:
            query = {"limit": 1000, "offset": offset, **({"prefix": prefix} if prefix else {})}
            page = self.request("GET", "files", query=query)
            paths.extend(item["path"] for item in page["results"])
            offset += len(page["results"])
            if not page.get("next") or not page["results"]:
                return paths

    def file_delete(self, *, path: str) -> dict:
        return self.request("DELETE", "files/" + urllib.parse.quote(path, safe="/"))

    def status(self) -> dict:
        return self.request("GET", "status")

    def search(self, *, body: dict) -> dict:
        return self.request("POST", "search", body=body)

    # --- Transport -------------------------------------------------------------------------------

    def request(self, method: str, endpoint: str, *, body: dict | None = None, query: dict | None = None) -> dict:
        url = self.root + API_PREFIX + endpoint
        query_string = urllib.parse.urlencode(query) if query else ""
        if query_string:
            url += "?" + query_string
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json", "User-Agent": USER_AGENT}
        data = None
        if body is not None:
            # ensure_ascii=False: text stays UTF-8 instead of growing up to 6x as \\uXXXX escapes.
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            headers["Content-Type"] = "application/json; charset=utf-8"
        for attempt in range(len(self.retry_delays) + 1):
            if self.webhook_secret and method != "GET":
                # Signed when sent: the server refuses a signature older than its tolerance (5 minutes).
                path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
                headers[SIGNATURE_HEADER] = write_signature(
                    secret=self.webhook_secret, method=method, path=path, query=query_string, body=data or b""
                )
            request = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                payload = self._send(request, method=method, endpoint=endpoint)
                break
            except ServerError as exc:
                if exc.status not in RETRY_STATUSES or attempt == len(self.retry_delays):
                    raise
                delay = exc.retry_after if exc.retry_after is not None else self.retry_delays[attempt]
                self.on_retry(f"{exc}; retrying in {delay:g} s")
                time.sleep(delay)
        try:
            return json.loads(payload) if payload else {}
        except ValueError:
            raise ServerError(f"{method} {endpoint} answered something that is not JSON (is {self.root} a MemoryHub server?)") from None

    def _send(self, request: urllib.request.Request, *, method: str, endpoint: str) -> bytes:
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            raise _http_error(exc, method=method, endpoint=endpoint) from None
        except urllib.error.URLError as exc:
            raise ServerError(f"cannot reach {self.root}: {exc.reason}") from None
        except (socket.timeout, TimeoutError):
            raise ServerError(f"{self.root} did not answer {method} {endpoint} within {self.timeout:g} s") from None
        except (OSError, http.client.HTTPException) as exc:
            raise ServerError(f"the connection to {self.root} failed during {method} {endpoint}: {exc!r}") from None


def _http_error(exc: urllib.error.HTTPError, *, method: str, endpoint: str) -> ServerError:
    try:
        raw = exc.read()
    except (OSError, http.client.HTTPException):
        raw = b""
    try:
        error = json.loads(raw)["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        code, message = None, f"{exc.reason} (not a MemoryHub error body)"
    try:
        retry_after = min(max(float(exc.headers.get("Retry-After", "")), 0.0), MAX_RETRY_AFTER)
    except (TypeError, ValueError):  # absent, or an HTTP date: use our own delays
        retry_after = None
    prefix = f"{method} {endpoint}: {exc.code}" + (f" {code}" if code else "")
    return ServerError(f"{prefix}: {message}", status=exc.code, code=code, retry_after=retry_after)
