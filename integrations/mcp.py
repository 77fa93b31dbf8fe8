"""MCP over streamable HTTP at ``/mcp``: memory_search and memory_get for MCP clients.

Stateless on purpose: every POST carries the agent's bearer token (or, for MCP clients that cannot send
a header, has it in the URL: ``/mcp/<token>``, read-only) and is answered in its own JSON
response (no session id, no server-initiated stream; ``GET`` is 405, which the transport allows), so any
web process can answer any request and nothing has to be kept between them.

Protocol: JSON-RPC 2.0 (single messages and, for 2025-03-26 clients, batches) with ``initialize``,
``notifications/initialized``, ``ping``, ``tools/list`` and ``tools/call``. Every handshake-era protocol
version is accepted; clients that probe for the newer stateless era (``server/discover``) are told
which versions this server speaks and fall back to ``initialize``.
"""

import logging
from importlib.metadata import PackageNotFoundError, version as package_version
from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.http.request import split_domain_port, validate_host
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions

from agents.authentication import AgentTokenAuthentication
from agents.models import AgentToken
from agents.throttles import RateLimited, TeamRateLimited, rate_limit_check, team_rate_limit_check
from memoryhub.errors import CLIENT_ERRORS, error_message, is_database_unavailable
from memoryhub.parsers import JsonTooDeep, json_loads_bounded
from integrations.tools import TOOL_RUNNERS, tool_definitions, tool_run

logger = logging.getLogger("memoryhub.mcp")

# Newest first: an initialize asking for a version not listed here is answered with the newest.
PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
PROTOCOL_VERSION_HEADER = "MCP-Protocol-Version"

# Every message of a batch runs a search or a read: a batch is bounded like any other request's work.
MAX_BATCH_MESSAGES = 20

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
UNSUPPORTED_PROTOCOL_VERSION = -32022
# Not a JSON-RPC code: the HTTP status (401/403) says it; the body keeps the JSON-RPC shape for clients.
UNAUTHORIZED, FORBIDDEN = -32001, -32003

INSTRUCTIONS = (
    "MemoryHub is this agent's long-term memory. Call memory_search before answering questions about prior "
    "work, decisions, dates, people or preferences; results cite path#Lstart-Lend. Call memory_get with that "
    "path and from=start to read more."
)


def _server_version() -> str:
    try:
        return package_version("memoryhub")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "0"


def _error(id, code: int, message: str, data=None) -> dict:
    error = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": id, "error": error}


def _result(id, result: dict) -> dict:
    return {"jsonrpc": "2.0", "id": id, "result": result}


def _http_error(status: int, code: int, message: str, data=None, headers: dict | None = None) -> JsonResponse:
    response = JsonResponse(_error(None, code, message, data), status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


class McpError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message


@method_decorator(csrf_exempt, name="dispatch")
class McpView(View):
    http_method_names = ["get", "post", "delete", "options"]

    def get(self, request, url_token=None):
        # No server-initiated stream: the transport lets a server refuse it with 405.
        return self._not_allowed()

    def delete(self, request, url_token=None):
        return self._not_allowed()  # no sessions to terminate

    def options(self, request, *args, **kwargs):
        return self._not_allowed()

    @staticmethod
    def _not_allowed() -> JsonResponse:
        return _http_error(405, INVALID_REQUEST, "Method not allowed: send JSON-RPC messages with POST.", headers={"Allow": "POST"})

    def post(self, request, url_token=None):
        refusal = self._check_origin(request)
        if refusal is not None:
            return refusal
        outcome = self._authenticate(request, url_token=url_token)
        if isinstance(outcome, JsonResponse):
            return outcome
        agent, token = outcome
        request.auth = token  # as DRF sets it for the REST API: the request's log line names the agent

        protocol_version = request.headers.get(PROTOCOL_VERSION_HEADER)
        if protocol_version and protocol_version not in PROTOCOL_VERSIONS:
            return _http_error(
                400,
                UNSUPPORTED_PROTOCOL_VERSION,
                f"Unsupported protocol version {protocol_version!r}.",
                data={"supported": list(PROTOCOL_VERSIONS), "requested": protocol_version},
            )

        try:
            payload = json_loads_bounded(request.body)
        except JsonTooDeep as exc:
            return _http_error(400, PARSE_ERROR, f"Parse error: {exc}")
        except ValueError:  # also UnicodeDecodeError
            return _http_error(400, PARSE_ERROR, "Parse error: the body must be a JSON-RPC message.")

        messages = payload if isinstance(payload, list) else [payload]
        if any(isinstance(message, dict) and message.get("method") == "tools/call" for message in messages):
            try:
                rate_limit_check(token=token, bucket="search")
                team_rate_limit_check(agent=agent)
            except (RateLimited, TeamRateLimited) as exc:
                return _http_error(429, INVALID_REQUEST, str(exc.detail), headers={"Retry-After": str(exc.wait)})

        if isinstance(payload, list):
            if not payload:
                return _http_error(400, INVALID_REQUEST, "An empty batch is not a JSON-RPC request.")
            if len(payload) > MAX_BATCH_MESSAGES:
                return _http_error(
                    400, INVALID_REQUEST, f"A batch holds at most {MAX_BATCH_MESSAGES} messages ({len(payload)} sent)."
                )
            replies = [reply for message in payload if (reply := self._handle(agent, message)) is not None]
            return JsonResponse(replies, safe=False) if replies else HttpResponse(status=202)
        reply = self._handle(agent, payload)
        if reply is None:
            return HttpResponse(status=202)  # a notification or a client's response: nothing to answer
        status = 400 if "error" in reply and reply["error"]["code"] in (PARSE_ERROR, INVALID_REQUEST) else 200
        return JsonResponse(reply, status=status)

    # --- HTTP-level checks ---------------------------------------------------------------------

    @staticmethod
    def _check_origin(request) -> JsonResponse | None:
        """Browsers send Origin; one that is not this server's own hosts is a DNS-rebinding attempt."""
        origin = request.headers.get("Origin")
        if not origin:
            return None  # not a browser: MCP clients and scripts send no Origin
        host, _ = split_domain_port(urlsplit(origin).netloc)
        if host and validate_host(host, settings.ALLOWED_HOSTS):
            return None
        return _http_error(403, FORBIDDEN, f"Origin {origin!r} is not allowed.")

    @staticmethod
    def _authenticate(request, *, url_token: str | None):
        """The header's token, or the URL's (``/mcp/<token>``) for clients that cannot send a header.

        A URL is copied into config files, proxy logs and screenshots more easily than a header, so a
        token in the URL only reads: the write tools are neither listed nor run, whatever its scopes.
        """
        challenge = {"WWW-Authenticate": 'Bearer realm="memoryhub"'}
        authentication = AgentTokenAuthentication()
        if url_token is not None and request.headers.get("Authorization"):
            return _http_error(400, INVALID_REQUEST, "Send the token once: in the Authorization header or in the URL, not both.")
        try:
            outcome = authentication.authenticate_token(url_token, ip=request.META.get("REMOTE_ADDR")) if url_token is not None else authentication.authenticate(request)
        except exceptions.AuthenticationFailed as exc:
            return _http_error(401, UNAUTHORIZED, str(exc.detail), headers=challenge)
        if outcome is None:
            return _http_error(401, UNAUTHORIZED, "Send 'Authorization: Bearer <agent token>'.", headers=challenge)
        agent, token = outcome
        if not token.has_scope(AgentToken.Scope.READ):
            return _http_error(403, FORBIDDEN, "This token lacks the 'read' scope.")
        # The write tools need the write scope, and the header: see the docstring.
        agent.token_can_write = token.has_scope(AgentToken.Scope.WRITE) and url_token is None
        return agent, token

    # --- JSON-RPC ------------------------------------------------------------------------------

    def _handle(self, agent, message) -> dict | None:
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return _error(message.get("id") if isinstance(message, dict) else None, INVALID_REQUEST, "Not a JSON-RPC 2.0 message.")
        method = message.get("method")
        if method is None:
            return None  # a response to a server request; this server never sends any
        if not isinstance(method, str):
            return _error(message.get("id"), INVALID_REQUEST, "method must be a string.")
        if "id" not in message:
            return None  # notifications (initialized, cancelled, …) need no answer
        request_id = message["id"]
        if request_id is not None and (isinstance(request_id, bool) or not isinstance(request_id, (str, int))):
            return _error(None, INVALID_REQUEST, "id must be a string or an integer.")
        params = message.get("params") or {}
        if not isinstance(params, dict):
            return _error(request_id, INVALID_PARAMS, "params must be an object.")
        handler = self.METHODS.get(method)
        if handler is None:
            return _error(request_id, METHOD_NOT_FOUND, f"Method not found: {method}")
        try:
            return _result(request_id, handler(self, agent, params))
        except McpError as exc:
            return _error(request_id, exc.code, exc.message)
        except Exception as exc:
            if is_database_unavailable(exc):
                raise  # the middleware answers 503 with Retry-After: the whole request failed, not this call
            logger.exception("MCP %s failed", method)
            return _error(request_id, INTERNAL_ERROR, "Internal error.")

    def _initialize(self, agent, params: dict) -> dict:
        requested = params.get("protocolVersion")
        return {
            "protocolVersion": requested if requested in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0],
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "memoryhub", "title": "MemoryHub", "version": _server_version()},
            "instructions": INSTRUCTIONS,
        }

    def _ping(self, agent, params: dict) -> dict:
        return {}

    def _tools_list(self, agent, params: dict) -> dict:
        return {"tools": tool_definitions(format="mcp", can_write=agent.token_can_write)}

    def _tools_call(self, agent, params: dict) -> dict:
        name = params.get("name")
        if not isinstance(name, str) or name not in TOOL_RUNNERS:
            raise McpError(INVALID_PARAMS, f"Unknown tool: {name}")
        try:
            output = tool_run(agent=agent, name=name, arguments=params.get("arguments"), can_write=agent.token_can_write)
        except CLIENT_ERRORS as exc:
            # A tool's own failure goes back to the model as a result, so it can correct its call.
            return {"content": [{"type": "text", "text": error_message(exc)}], "isError": True}
        return {"content": [{"type": "text", "text": output.content}], "structuredContent": output.data, "isError": False}

    METHODS = {
        "initialize": _initialize,
        "ping": _ping,
        "tools/list": _tools_list,
        "tools/call": _tools_call,
    }
