"""POST /api/v1/search — hybrid search over this agent's memory (read scope). A thin view over
search.services.memory_search; the file filters are flat fields of the request body, the attribute
filters a tree under ``filters`` (indexing/attributes.py)."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from indexing.models import MemoryFile
from indexing.paths import prefix_normalize
from memoryhub.fields import (
    AttributeFilterField,
    ClientDatetimeField,
    ScopeField,
    StrictBooleanField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
    StrictSerializer,
)
from search.services import MODES, memory_search
from search.types import SearchFilters


class ResultSerializer(serializers.Serializer):
    path = serializers.CharField()
    start_line = serializers.IntegerField()
    end_line = serializers.IntegerField()
    score = serializers.FloatField()
    snippet = serializers.CharField()
    source = serializers.CharField()
    attributes = serializers.DictField()
    owner = serializers.CharField(required=False, help_text="The owner agent of a granted memory; absent for the agent's own files.")

    def to_representation(self, instance):
        data = super().to_representation(instance)
        if data.get("owner") is None:
            data.pop("owner", None)
        return data


class SearchApi(APIView):
    required_scope = "read"
    openapi_error_statuses = (503,)  # search_timeout: nothing found before the search's deadline

    class InputSerializer(StrictSerializer):
        query = StrictCharField(trim_whitespace=False, allow_blank=True)
        max_results = StrictIntegerField(required=False, allow_null=True)
        min_score = StrictFloatField(required=False, allow_null=True)
        mode = serializers.ChoiceField(choices=MODES, required=False, allow_null=True)
        sources = serializers.ListField(
            child=serializers.ChoiceField(choices=MemoryFile.Source.values), required=False, allow_empty=True
        )
        path_prefix = StrictCharField(required=False, allow_blank=True, trim_whitespace=False)
        modified_since = ClientDatetimeField(required=False, allow_null=True)
        modified_until = ClientDatetimeField(required=False, allow_null=True)
        filters = AttributeFilterField(required=False, allow_null=True)
        explain = StrictBooleanField(required=False, default=False)
        scope = ScopeField(required=False, default="own")

    class OutputSerializer(serializers.Serializer):
        ResultSerializer = ResultSerializer

        class ExplainedResultSerializer(ResultSerializer):
            explain = serializers.DictField()

        results = serializers.SerializerMethodField()
        mode = serializers.CharField()
        pending = serializers.IntegerField()
        took_ms = serializers.FloatField()
        message = serializers.CharField(allow_blank=True)

        @extend_schema_field(ResultSerializer(many=True))  # plus "explain" on each result when asked
        def get_results(self, response):
            explained = self.context.get("explain")
            serializer = self.ExplainedResultSerializer if explained else self.ResultSerializer
            return serializer(response.results, many=True).data

    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        filters = SearchFilters(
            sources=tuple(dict.fromkeys(data.get("sources") or ())),
            path_prefix=prefix_normalize(data.get("path_prefix")),
            modified_since=data.get("modified_since"),
            modified_until=data.get("modified_until"),
            attributes=data.get("filters"),
        )
        response = memory_search(
            agent=request.user,
            query=data["query"],
            max_results=data.get("max_results"),
            min_score=data.get("min_score"),
            mode=data.get("mode"),
            filters=filters,
            explain=data["explain"],
            scope=data["scope"],
        )
        return Response(self.OutputSerializer(response, context={"explain": data["explain"]}).data)
