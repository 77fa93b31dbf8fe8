"""One error shape for the whole API: ``{"error": {"code": "...", "message": "..."}}``.

DRF exceptions keep their status; anything unexpected becomes a plain 500 with no stack trace
(the trace goes to the log). Django-level 404/500 on /api/ paths use the same shape.
"""

import logging

import psycopg
from django.db import InterfaceError, OperationalError
from django.http import Http404, JsonResponse
from django.views.defaults import page_not_found, server_error
from rest_framework import exceptions, status
from rest_framework.response import Response

from memoryhub import domain
from memoryhub.postgresql.reachable import database_reachable

logger = logging.getLogger("memoryhub.api")


class ApiError(exceptions.APIException):
    """An error of the API layer itself (rate limits, unknown tools, bad formats) with an explicit
    status, a stable machine-readable code and a human message. The domain raises DomainError
    (memoryhub/domain.py) instead, which HTTP_STATUS maps to a status."""

    def __init__(self, *, status_code: int, code: str, message: str):
        self.status_code = status_code
        super().__init__(detail=message, code=code)


# The status each kind of domain error is answered with.
HTTP_STATUS: dict[type[domain.DomainError], int] = {
    domain.InvalidInput: 400,
    domain.Forbidden: 403,
    domain.NotFound: 404,
    domain.PreconditionFailed: 412,
    domain.TooLarge: 413,
    domain.UnsupportedContent: 415,
    domain.Inconsistent: 422,
    domain.Busy: 503,
}
# Errors a client caused, whichever layer found them: what tools, MCP and commands catch to report.
CLIENT_ERRORS = (ApiError, domain.DomainError)


def http_status(exc: domain.DomainError) -> int:
    for kind in type(exc).__mro__:
        if kind in HTTP_STATUS:
            return HTTP_STATUS[kind]
    return 400


def error_message(exc: BaseException) -> str:
    """The client's message of an ApiError or a DomainError."""
    return str(exc.detail) if isinstance(exc, ApiError) else str(exc)


def error_code(exc: BaseException) -> str:
    return exc.get_codes() if isinstance(exc, ApiError) else exc.code


_LOCK_CONFLICTS = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)


def is_lock_conflict(exc: BaseException) -> bool:
    """A transaction Postgres aborted because of concurrent writers (deadlock, serialization failure):
    nothing of it was written and running it again normally succeeds."""
    return isinstance(exc, OperationalError) and isinstance(exc.__cause__, _LOCK_CONFLICTS)


# Seconds a client is asked to wait when the database does not answer (a restart, a failover).
DATABASE_RETRY_AFTER_SECONDS = 5


def is_database_unavailable(exc: BaseException) -> bool:
    """The database could not be reached or dropped the connection (server stopped, restarting,
    out of connection slots), as opposed to a query it refused or a lock conflict."""
    if isinstance(exc, InterfaceError):
        return True
    if not isinstance(exc, OperationalError) or is_lock_conflict(exc):
        return False
    cause = exc.__cause__
    # A cancelled statement (statement_timeout) is the query's own failure, not an outage.
    return not isinstance(cause, psycopg.errors.QueryCanceled)


def database_unavailable_body(exc: BaseException | None = None) -> dict:
    """The 503 body for ``is_database_unavailable``: the database is down, or (a pool timeout while the
    database answers) every connection of this server is busy."""
    pool_timeout = exc is not None and exc.__cause__ is not None and exc.__cause__.__class__.__name__ == "PoolTimeout"
    if pool_timeout and database_reachable():
        return error_body("server_busy", "Every database connection of this server is in use. Try again shortly.")
    return error_body("database_unavailable", "The database is not answering. Try again shortly.")


def error_body(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


def _message_from_detail(detail) -> str:
    """Flatten DRF's nested validation details into one readable sentence."""
    if isinstance(detail, dict):
        parts = []
        for field, value in detail.items():
            text = _message_from_detail(value)
            parts.append(text if field == "non_field_errors" else f"{field}: {text}")
        return "; ".join(parts)
    if isinstance(detail, list):
        return " ".join(_message_from_detail(item) for item in detail)
    return str(detail)


def _code_from_exception(exc: exceptions.APIException) -> str:
    if isinstance(exc, exceptions.ValidationError):
        return "invalid_request"
    codes = exc.get_codes()
    return codes if isinstance(codes, str) else exc.default_code


def api_exception_handler(exc, context):
    if isinstance(exc, domain.DomainError):
        body = error_body(exc.code, exc.message)
        body["error"].update(exc.details)  # e.g. a 412's current_hash
        response = Response(body, status=http_status(exc))
        if isinstance(exc, domain.Busy):
            response["Retry-After"] = "1"
        return response
    if isinstance(exc, exceptions.APIException):
        body = error_body(_code_from_exception(exc), _message_from_detail(exc.detail))
        body["error"].update(getattr(exc, "details", None) or {})  # e.g. a 412's current_hash
        response = Response(body, status=exc.status_code)
        if getattr(exc, "auth_header", None):
            response["WWW-Authenticate"] = exc.auth_header
        if getattr(exc, "wait", None):
            response["Retry-After"] = str(int(exc.wait))
        return response
    if isinstance(exc, Http404):
        return Response(error_body("not_found", "Not found."), status=status.HTTP_404_NOT_FOUND)
    if is_lock_conflict(exc):  # last safety net; the write services retry such conflicts themselves
        logger.warning("lock conflict in %s: %s", context.get("view").__class__.__name__, exc)
        response = Response(
            error_body("write_conflict", "The request met a concurrent write and nothing was changed. Try again."),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
        )
        response["Retry-After"] = "1"
        return response
    if is_database_unavailable(exc):
        logger.error("database unavailable in %s: %s", context.get("view").__class__.__name__, exc)
        response = Response(database_unavailable_body(exc), status=status.HTTP_503_SERVICE_UNAVAILABLE)
        response["Retry-After"] = str(DATABASE_RETRY_AFTER_SECONDS)
        return response
    logger.exception("unhandled error in %s", context.get("view").__class__.__name__)
    return Response(error_body("server_error", "Internal server error."), status=500)


def _wants_json(request) -> bool:
    return not request.path.startswith("/admin/")


def is_api_path(path: str) -> bool:
    """Paths whose every answer, errors included, is JSON: the REST API and the MCP endpoint."""
    return path.startswith("/api/") or path == "/mcp" or path.startswith("/mcp/")


def handler404(request, exception=None):
    if not _wants_json(request):
        return page_not_found(request, exception)
    return JsonResponse(error_body("not_found", f"No such endpoint: {request.path}"), status=404)


def handler500(request):
    if not _wants_json(request):
        return server_error(request)
    return JsonResponse(error_body("server_error", "Internal server error."), status=500)
