"""JSON error answers on the API and MCP paths, whatever happens below them and in every mode.

DRF's exception handler covers the REST views; this middleware covers the rest: a URL that matches
no route (under DEBUG, Django would answer its HTML debug page), the MCP view (plain Django), and a
database that stopped answering anywhere in the request (503 with Retry-After, never a 500 or an
HTML page). The admin keeps Django's own pages.
"""

import logging

from django.http import JsonResponse

from memoryhub.errors import (
    DATABASE_RETRY_AFTER_SECONDS,
    database_unavailable_body,
    error_body,
    is_api_path,
    is_database_unavailable,
)

logger = logging.getLogger("memoryhub.api")


class ApiJsonErrorsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (
            response.status_code == 404
            and is_api_path(request.path)
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            return JsonResponse(error_body("not_found", f"No such endpoint: {request.path}"), status=404)
        return response

    def process_exception(self, request, exception):
        if not is_api_path(request.path):
            return None
        if is_database_unavailable(exception):
            logger.error("database unavailable during %s %s: %s", request.method, request.path, exception)
            response = JsonResponse(database_unavailable_body(exception), status=503)
            response["Retry-After"] = str(DATABASE_RETRY_AFTER_SECONDS)
            return response
        logger.exception("unhandled error during %s %s", request.method, request.path)
        return JsonResponse(error_body("server_error", "Internal server error."), status=500)
