"""Tool endpoints: the tool definitions in each framework's shape, and one endpoint per tool call.

An agent loop hands ``GET tools?format=openai`` to its model as is, and forwards each tool call the
model makes, arguments untouched, to ``POST tools/<name>``; ``content`` goes back to the model.
"""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.models import AgentToken
from integrations.tools import TOOL_FORMATS, TOOL_NAMES, TOOL_SCHEMAS, tool_definitions, tool_run


class ToolFormatNegotiation(DefaultContentNegotiation):
    """Here ``?format=`` names a tool format, not one of DRF's renderers (the API only speaks JSON)."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return super().select_renderer(request, renderers, format_suffix="json")


class ToolListApi(APIView):
    """GET /api/v1/tools?format=openai|anthropic|mcp|responses — the tools this token may call, ready for a model."""

    required_scope = "read"
    content_negotiation_class = ToolFormatNegotiation

    class InputSerializer(serializers.Serializer):
        format = serializers.ChoiceField(choices=TOOL_FORMATS, default="openai")

    class OutputSerializer(serializers.Serializer):
        format = serializers.CharField()
        tools = serializers.ListField(child=serializers.DictField())

    @extend_schema(
        parameters=[InputSerializer],
        responses=OutputSerializer,
        summary="Tool definitions (the write tools only for a token with the write scope)",
    )
    def get(self, request):
        serializer = self.InputSerializer(data=request.query_params)
        serializer.is_valid(raise_exception=True)
        format = serializer.validated_data["format"]
        tools = tool_definitions(format=format, can_write=request.auth.has_scope(AgentToken.Scope.WRITE))
        return Response(self.OutputSerializer({"format": format, "tools": tools}).data)


class ToolRunApi(APIView):
    """POST /api/v1/tools/<name> — run one tool with the arguments the model gave it."""

    required_scope = "read"
    openapi_error_statuses = (503,)  # memory_search's search_timeout

    class OutputSerializer(serializers.Serializer):
        content = serializers.CharField(help_text="Text for the model, citing path#Lstart-Lend.")
        data = serializers.DictField(help_text="The same answer as JSON (memory_search: results, mode, pending, …; memory_get: path, from, lines, total_lines, content, source).")

    @extend_schema(
        parameters=[OpenApiParameter("name", OpenApiTypes.STR, OpenApiParameter.PATH, enum=list(TOOL_NAMES))],
        request={"application/json": {"anyOf": [TOOL_SCHEMAS[name] for name in TOOL_NAMES]}},
        responses=OutputSerializer,
        summary="Run one tool (memory_search, memory_get, memory_write, memory_append, memory_delete)",
        examples=[
            OpenApiExample("memory_search", value={"query": "what did we decide about the database?", "maxResults": 6}, request_only=True),
            OpenApiExample("memory_get", value={"path": "memory/2026-03-01.md", "from": 10, "lines": 20}, request_only=True),
            OpenApiExample("memory_write", value={"path": "falcon.md", "content": "Launch moved to April.\n"}, request_only=True),
        ],
    )
    def post(self, request, name: str):
        arguments = request.data if request.body else {}
        output = tool_run(
            agent=request.user, name=name, arguments=arguments, can_write=request.auth.has_scope(AgentToken.Scope.WRITE)
        )
        return Response(self.OutputSerializer({"content": output.content, "data": output.data}).data)
