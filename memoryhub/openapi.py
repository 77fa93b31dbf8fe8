"""OpenAPI 3 for the agent API (drf-spectacular), read from the code as it is written.

Three conventions of this code base need teaching to drf-spectacular:
- views are plain APIViews with nested ``InputSerializer`` / ``OutputSerializer``: the input
  serializer is the request body of POST/PUT and the query parameters of GET;
- one URL may dispatch to one APIView per HTTP method (``indexing.urls.by_method``): each method's view
  is documented under that path;
- every error is ``{"error": {"code", "message"}}``: each operation lists the error statuses it can
  answer with that shape, instead of leaving them undocumented.
"""

import re

from drf_spectacular import generators, openapi
from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiSerializerFieldExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from rest_framework import serializers
from rest_framework.parsers import JSONParser

from memoryhub.fields import DATE_MAX, DATE_MIN

ERROR_DESCRIPTIONS = {
    400: "Invalid input (bad parameter, body or path).",
    401: "Missing, malformed, unknown, revoked or expired token (or a bad webhook signature).",
    403: "The token lacks the scope this operation needs.",
    404: "No such object for this agent.",
    409: "Conflict.",
    413: "Body, file or per-agent quota too large; the message gives the numbers.",
    415: "Unsupported media type, binary content, invalid encoding or file type.",
    422: "The request is well-formed but inconsistent (e.g. source vs path).",
    429: "Too many requests for this token (rate_limited); Retry-After says when to try again.",
    503: "Busy or a dependency is down (server_busy, database_unavailable, search_timeout); Retry-After says when to try again.",
}


class ErrorSerializer(serializers.Serializer):
    """Every error MemoryHub answers: a stable machine-readable code and a sentence for people."""

    class BodySerializer(serializers.Serializer):
        code = serializers.CharField(help_text="Stable machine-readable code, e.g. invalid_path, not_found.")
        message = serializers.CharField(help_text="What went wrong, in words.")

    error = BodySerializer()


class AgentTokenScheme(OpenApiAuthenticationExtension):
    target_class = "agents.authentication.AgentTokenAuthentication"
    name = "agentToken"

    def get_security_definition(self, auto_schema):
        scheme = build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Bearer")
        scheme["description"] = "An agent token (mh_…); it decides which agent's memory every call sees."
        return scheme


class TextContentFieldSchema(OpenApiSerializerFieldExtension):
    target_class = "indexing.apis.TextContentField"

    def map_serializer_field(self, auto_schema, direction):
        return {"type": "string", "description": "The file's text, UTF-8, as is."}


class ClientDatetimeFieldSchema(OpenApiSerializerFieldExtension):
    target_class = "memoryhub.fields.ClientDatetimeField"

    def map_serializer_field(self, auto_schema, direction):
        if direction == "response":
            return {"type": "string", "format": "date-time"}
        return {
            "oneOf": [
                {"type": "string", "format": "date-time"},
                {"type": "number", "minimum": DATE_MIN.timestamp(), "maximum": DATE_MAX.timestamp() - 1},
            ],
            "description": f"ISO 8601 (offsets up to ±14:00), or Unix seconds; from {DATE_MIN:%Y-%m-%d} to {DATE_MAX:%Y-%m-%d} UTC.",
        }


def _suffixless(name: str) -> str:
    return re.sub(r"(Api|Serializer)$", "", name)


class AutoSchema(openapi.AutoSchema):
    def get_operation_id(self):
        # FileListApi -> file_list: stable ids that say which view answers.
        name = _suffixless(type(self.view).__name__)
        return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()

    def get_serializer_name(self, serializer, direction):
        # Nested serializers are all called InputSerializer/OutputSerializer: name them by their view,
        # WorkspaceSyncApi.InputSerializer.FileSerializer -> WorkspaceSyncInputFile.
        parts = serializer.__class__.__qualname__.split(".")
        if len(parts) == 1:
            return super().get_serializer_name(serializer, direction)
        return "".join(_suffixless(part) for part in parts)

    def _body_methods(self) -> bool:
        return self.method in ("POST", "PUT", "PATCH")

    def get_request_serializer(self):
        serializer = getattr(self.view, "InputSerializer", None)
        if self._body_methods() and serializer is not None:
            return serializer
        return None if self._body_methods() else super().get_request_serializer()

    def get_response_serializers(self):
        serializer = getattr(self.view, "OutputSerializer", None)
        if serializer is None:
            return super().get_response_serializers()
        if self.method == "GET" and getattr(self.view, "pagination_class", None):
            return serializer(many=True)
        return serializer

    def get_override_parameters(self):
        parameters = super().get_override_parameters()
        serializer = getattr(self.view, "InputSerializer", None)
        # A GET view's InputSerializer reads the query string, unless @extend_schema (which subclasses
        # this class) spells the parameters out, as memory_get does for its `from`.
        decorated = type(self).get_override_parameters is not AutoSchema.get_override_parameters
        if self.method == "GET" and serializer is not None and not decorated:
            parameters = [*parameters, serializer]
        return parameters

    def _get_serializer(self):
        # Views without any serializer (none here today) would otherwise log a warning per operation.
        return None

    def map_parsers(self):
        # RawTextParser takes "*/*", which is not a media type a client can send.
        return [media for media in super().map_parsers() if media != "*/*"] or [JSONParser.media_type]

    def _error_statuses(self) -> list[int]:
        statuses = set(getattr(self.view, "openapi_error_statuses", ()))
        if self.get_auth():
            statuses |= {401, 403, 429}  # every authenticated call counts against the token's rates
        has_input = self._get_parameters() or self._body_methods()
        if has_input:
            statuses.add(400)
        if "{" in self.path:
            statuses.add(404)
        return sorted(statuses)

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        if self.method == "DELETE" and "204" in responses and getattr(self.view, "OutputSerializer", None):
            # drf-spectacular assumes an empty 204; MemoryHub's deletes answer 200 with what was removed.
            del responses["204"]
            responses["200"] = self._get_response_for_code(self.view.OutputSerializer, "200", direction=direction)
        error_ref = self.resolve_serializer(ErrorSerializer, "response").ref
        for status in self._error_statuses():
            responses.setdefault(
                str(status),
                {"description": ERROR_DESCRIPTIONS.get(status, "Error."), "content": {"application/json": {"schema": error_ref}}},
            )
        return responses


class EndpointEnumerator(generators.EndpointEnumerator):
    """Sees through ``by_method`` dispatchers: each HTTP method's APIView is an endpoint of the path."""

    def _get_api_endpoints(self, patterns, prefix):
        if patterns is None:
            patterns = self.patterns
        endpoints = []
        for pattern in patterns:
            method_views = getattr(getattr(pattern, "callback", None), "method_views", None)
            if method_views is None:
                endpoints.extend(super()._get_api_endpoints([pattern], prefix))
                continue
            path_regex = prefix + str(pattern.pattern)
            path = self.get_path_from_regex(path_regex)
            for method, view in method_views.items():
                if self.should_include_endpoint(path, view):
                    endpoints.append((path, path_regex, method, view))
        return endpoints


class SchemaGenerator(generators.SchemaGenerator):
    endpoint_inspector_cls = EndpointEnumerator
