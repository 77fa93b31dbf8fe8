from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from indexing.selectors import agent_index_status


class AgentStatusApi(APIView):
    """GET /api/v1/status — how much of this agent's memory is indexed, and with what."""

    required_scope = "read"

    class OutputSerializer(serializers.Serializer):
        class EmbeddingSerializer(serializers.Serializer):
            provider = serializers.CharField()
            model = serializers.CharField(allow_null=True)
            dimensions = serializers.IntegerField(allow_null=True)
            vector_search = serializers.BooleanField()

        agent = serializers.CharField()
        files = serializers.IntegerField()
        chunks = serializers.IntegerField()
        pending = serializers.IntegerField()
        failed = serializers.IntegerField()
        failed_jobs = serializers.IntegerField()
        embedding = EmbeddingSerializer()
        last_indexed_at = serializers.DateTimeField(allow_null=True)

    def get(self, request):
        status = agent_index_status(agent=request.user)
        return Response(self.OutputSerializer({"agent": request.user.slug, **status}).data)
