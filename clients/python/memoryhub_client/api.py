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
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from memoryhub_client import __version__
from memoryhub_client.errors import ConfigError, ServerError

if TYPE_CHECKING:  # the answers' shapes; not imported at run time, to keep start-up short
    from memoryhub_client.api_types import (
        ExportedFile, FileDeleted, FileLines, FileList, FileListItem, FileWritten, Job, SearchResponse, Status,
        SyncEntry, SyncResponse, ToolDefinitions, ToolResult,
    )

API_PREFIX = "/api/v1/"
SIGNATURE_HEADER = "X-MemoryHub-Signature"
USER_AGENT = f"memoryhub-client/{__version__}"
EXPORT_FORMAT = "memoryhub-export"




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


# Most calls are idempotent (a sync states what the server should hold), so a request that met a busy
# or briefly failing server (429, a deadlock's 500, a proxy's 502-504) is sent again. An append is not:
# after a 500 or a proxy's timeout it may have landed, so it is repeated only after the answers that
# guarantee nothing was written (429 before the request ran, 503 write_conflict).
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
RETRY_STATUSES_NOT_IDEMPOTENT = frozenset({429, 503})
RETRY_DELAYS = (1.0, 3.0)  # seconds before the 2nd and 3rd attempt, unless Retry-After says otherwise
MAX_RETRY_AFTER = 30.0


class ApiClient:
    """One method per endpoint of the MemoryHub API v1, answering the server's JSON as typed dicts
    (``memoryhub_client.api_types``). Paths are the agent's file paths (``memory/2026-03-01.md``)."""

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

    # --- Files -----------------------------------------------------------------------------------

    def file_put(self, *, path: str, content: str, source: str | None = None, mtime: str | float | None = None,
                 attributes: dict | None = None, expected_hash: str | None = None) -> FileWritten:
        """``PUT files/<path>``: create or replace one file. ``expected_hash`` makes it conditional
        (``If-Match``; ``""``: only if the file does not exist yet), else 412 ``hash_mismatch``."""
        body = _present(content=content, source=source, mtime=mtime, attributes=attributes)
        return self.request("PUT", _file_endpoint(path), body=body, if_match=expected_hash)

    def file_append(self, *, path: str, text: str, source: str | None = None, mtime: str | float | None = None,
                    attributes: dict | None = None, expected_hash: str | None = None) -> FileWritten:
        """``POST files/<path>/append``: ``text`` goes on a new line at the end (the file is created when absent)."""
        body = _present(text=text, source=source, mtime=mtime, attributes=attributes)
        return self.request("POST", _file_endpoint(path) + "/append", body=body, if_match=expected_hash, idempotent=False)

    def file_get(self, *, path: str, start: int | None = None, lines: int | None = None) -> FileLines:
        """``GET files/<path>?from=&lines=`` (memory_get): lines ``start`` … ``start + lines - 1``, 1-indexed."""
        return self.request("GET", _file_endpoint(path), query=_present(**{"from": start, "lines": lines}))

    def file_delete(self, *, path: str) -> FileDeleted:
        return self.request("DELETE", _file_endpoint(path))

    def file_page(self, *, prefix: str = "", source: str | None = None, limit: int = 100, offset: int = 0) -> FileList:
        """``GET files``: one page of this agent's files, by path."""
        return self.request("GET", "files", query=_present(prefix=prefix or None, source=source, limit=limit, offset=offset))

    def file_iter(self, *, prefix: str = "", source: str | None = None) -> Iterator[FileListItem]:
        """Every file under ``prefix``, following the pages."""
        offset = 0
        while True:
            page = self.file_page(prefix=prefix, source=source, limit=1000, offset=offset)
            yield from page["results"]
            offset += len(page["results"])
            if not page.get("next") or not page["results"]:
                return

    def file_list(self, *, prefix: str = "") -> list[str]:
        """Every path of this agent's files under ``prefix``."""
        return [item["path"] for item in self.file_iter(prefix=prefix)]

    # --- Sync, jobs, status, export --------------------------------------------------------------

    def sync(self, *, files: list[SyncEntry], delete_missing: bool = False, prefix: str = "") -> SyncResponse:
        """``POST sync``: entries with ``content`` are stored; entries with only a ``hash`` come back in
        ``needed`` when the server lacks that content. ``delete_missing`` removes unlisted files under ``prefix``."""
        body: dict = {"files": files, "delete_missing": delete_missing}
        if prefix:
            body["prefix"] = prefix
        return self.request("POST", "sync", body=body)

    def job(self, job_id: int) -> Job:
        return self.request("GET", f"jobs/{int(job_id)}")

    def status(self) -> Status:
        """``GET status``: ``pending`` is 0 once every accepted change is searchable."""
        return self.request("GET", "status")

    def export(self) -> Iterator[ExportedFile]:
        """``GET export``: every file of the agent (``path, source, mtime, hash, attributes, content``),
        by path, read line by line from the stream (the header line is checked, not yielded)."""
        # JSON named too: the server's content negotiation answers 406 to application/x-ndjson alone.
        with self._open("GET", "export", accept="application/x-ndjson, application/json") as response:
            header = _json_line(response.readline(), where="GET export")
            if not isinstance(header, dict) or header.get("format") != EXPORT_FORMAT:
                raise ServerError(f"GET export answered something that is not a MemoryHub export (is {self.root} a MemoryHub server?)")
            for raw in response:
                if raw.strip():
                    yield _json_line(raw, where="GET export")

    # --- Search and tools ------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        max_results: int | None = None,
        min_score: float | None = None,
        mode: str | None = None,
        sources: list[str] | None = None,
        path_prefix: str | None = None,
        modified_since: str | float | None = None,
        modified_until: str | float | None = None,
        filters: dict | None = None,
        explain: bool | None = None,
        scope: str | list[str] | None = None,
    ) -> SearchResponse:
        """``POST search``: a few short snippets, each citing ``path`` and ``start_line``–``end_line``.
        ``filters`` are on the files' attributes: ``{"type": "eq", "key": "project", "value": "falcon"}``,
        ``{"type": "and", "filters": [...]}`` (docs/api.md, "Attributes"). ``scope``: ``"own"`` (default),
        ``"shared"`` (with the memories granted to this agent) or a list of memory names; a granted
        memory's results carry ``owner`` (docs/teams.md)."""
        body = _present(
            query=query, max_results=max_results, min_score=min_score, mode=mode, sources=sources, path_prefix=path_prefix,
            modified_since=modified_since, modified_until=modified_until, filters=filters, explain=explain, scope=scope,
        )
        return self.request("POST", "search", body=body)

    def tool_definitions(self, *, format: str = "openai") -> ToolDefinitions:
        """``GET tools?format=openai|anthropic|mcp``: the memory tools in one SDK's shape."""
        return self.request("GET", "tools", query={"format": format})

    def tool_run(self, name: str, arguments: dict) -> ToolResult:
        """``POST tools/<name>``: run one tool with the arguments the model gave it (``content`` for the model)."""
        endpoint = "tools/" + urllib.parse.quote(name, safe="")
        return self.request("POST", endpoint, body=arguments, idempotent=name != "memory_append")

    # --- Transport -------------------------------------------------------------------------------

    def request(self, method: str, endpoint: str, *, body: dict | list | None = None, query: dict | None = None,
                if_match: str | None = None, idempotent: bool = True) -> Any:
        """One call, ``endpoint`` relative to ``/api/v1/``; the answer's JSON."""
        with self._open(method, endpoint, body=body, query=query, if_match=if_match, idempotent=idempotent) as response:
            payload = self._read(response, method=method, endpoint=endpoint)
        try:
            return json.loads(payload) if payload else {}
        except ValueError:
            raise ServerError(f"{method} {endpoint} answered something that is not JSON (is {self.root} a MemoryHub server?)") from None

    def _open(self, method: str, endpoint: str, *, body=None, query: dict | None = None, if_match: str | None = None,
              idempotent: bool = True, accept: str = "application/json"):
        """The server's response, open (the caller reads it), after retrying a busy or failing server."""
        url = self.root + API_PREFIX + endpoint
        query_string = urllib.parse.urlencode(query) if query else ""
        if query_string:
            url += "?" + query_string
        headers = {"Authorization": f"Bearer {self.token}", "Accept": accept, "User-Agent": USER_AGENT}
        if if_match is not None:
            headers["If-Match"] = f'"{if_match}"'
        data = None
        if body is not None:
            # ensure_ascii=False: text stays UTF-8 instead of growing up to 6x as \\uXXXX escapes.
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            headers["Content-Type"] = "application/json; charset=utf-8"
        retry_statuses = RETRY_STATUSES if idempotent else RETRY_STATUSES_NOT_IDEMPOTENT
        for attempt in range(len(self.retry_delays) + 1):
            if self.webhook_secret and method != "GET":
                # Signed when sent: the server refuses a signature older than its tolerance (5 minutes).
                path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
                headers[SIGNATURE_HEADER] = write_signature(
                    secret=self.webhook_secret, method=method, path=path, query=query_string, body=data or b""
                )
            request = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                return self._send(request, method=method, endpoint=endpoint)
            except ServerError as exc:
                # A conditional write is not repeated: a first attempt that did land would make it a 412.
                if exc.status not in retry_statuses or attempt == len(self.retry_delays) or if_match is not None:
                    raise
                delay = exc.retry_after if exc.retry_after is not None else self.retry_delays[attempt]
                self.on_retry(f"{exc}; retrying in {delay:g} s")
                time.sleep(delay)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _send(self, request: urllib.request.Request, *, method: str, endpoint: str):
        try:
            return urllib.request.urlopen(request, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            raise _http_error(exc, method=method, endpoint=endpoint) from None
        except urllib.error.URLError as exc:
            raise ServerError(f"cannot reach {self.root}: {exc.reason}") from None
        except (socket.timeout, TimeoutError):
            raise ServerError(f"{self.root} did not answer {method} {endpoint} within {self.timeout:g} s") from None
        except (OSError, http.client.HTTPException) as exc:
            raise ServerError(f"the connection to {self.root} failed during {method} {endpoint}: {exc!r}") from None

    def _read(self, response, *, method: str, endpoint: str) -> bytes:
        try:
            return response.read()
        except (socket.timeout, TimeoutError):
            raise ServerError(f"{self.root} did not finish answering {method} {endpoint} within {self.timeout:g} s") from None
        except (OSError, http.client.HTTPException) as exc:
            raise ServerError(f"the connection to {self.root} failed during {method} {endpoint}: {exc!r}") from None


def _present(**fields) -> dict:
    """The fields that were given (None means "not sent", so the server applies its default)."""
    return {key: value for key, value in fields.items() if value is not None}


def _file_endpoint(path: str) -> str:
    return "files/" + urllib.parse.quote(path, safe="/")


def _json_line(raw: bytes, *, where: str):
    try:
        return json.loads(raw)
    except ValueError:
        raise ServerError(f"{where}: a line of the answer is not JSON") from None


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
