"""The agent-facing indexing API: status, files (upload, list, memory_get, delete), sync, jobs.

Thin views: each validates its input with a nested InputSerializer and calls one service or selector.
Size limits are checked against Content-Length before the body is read (413 from MemoryHub, never a
bare 400 from Django), and a signed write's HMAC (agents/permissions.py) on the raw body before it is parsed.
"""

from django.conf import settings
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import BaseParser
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from indexing.models import IndexJob, MemoryFile
from indexing.paths import path_normalize, prefix_normalize
from indexing.selectors import (
    MEMORY_GET_DEFAULT_LINES,
    MEMORY_GET_MAX_FROM,
    MEMORY_GET_MAX_LINES,
    agent_index_status,
    file_list,
    file_read_lines,
    job_get,
)
from indexing.writes import (
    SyncEntry,
    content_from_bytes,
    file_delete,
    file_ingest,
    hash_normalize,
    workspace_sync,
)
from memoryhub.errors import ApiError
from memoryhub.fields import AttributesField, ClientDatetimeField, StrictBooleanField, StrictCharField, StrictSerializer
from memoryhub.parsers import BoundedJSONParser

class AgentStatusApi(APIView):
    """GET /api/v1/status — how much of this agent's memory is indexed, and with what."""

    required_scope = "read"

    class OutputSerializer(serializers.Serializer):
        class EmbeddingSerializer(serializers.Serializer):
            class ModelCheckSerializer(serializers.Serializer):
                state = serializers.ChoiceField(
                    choices=["same", "changed", "unchecked", "failed"],
                    help_text=(
                        "The last check that the model behind the configured name still gives the index's vectors "
                        "(every MEMORYHUB_EMBEDDING_CHECK_INTERVAL): same; changed (another model answers under the "
                        "name: searches answer by keywords while a quarter or more of the checked chunks do not match, "
                        "until the operator sets MEMORYHUB_EMBEDDING_REVISION); unchecked (nothing compared yet); "
                        "failed (the provider did not answer)."
                    ),
                )
                checked_at = serializers.DateTimeField(allow_null=True)
                changed_since = serializers.DateTimeField(allow_null=True)

            provider = serializers.CharField()
            model = serializers.CharField(allow_null=True)
            revision = serializers.CharField(
                allow_null=True,
                help_text="MEMORYHUB_EMBEDDING_REVISION: the operator's name for the model's version (null: none).",
            )
            dimensions = serializers.IntegerField(allow_null=True)
            vector_search = serializers.BooleanField()
            chosen = serializers.ChoiceField(
                choices=["auto", "setting"],
                help_text="auto: MEMORYHUB_EMBEDDING_PROVIDER=auto picked the provider at start; setting: named by the operator.",
            )
            window = serializers.IntegerField(
                allow_null=True, help_text="cl100k tokens a chunk may hold: every one of them is read by the model (null: no vectors)."
            )
            window_source = serializers.ChoiceField(
                choices=["settings", "measured", "unmeasured"],
                help_text=(
                    "settings: MEMORYHUB_EMBEDDING_MAX_INPUT_TOKENS or the model's known window; measured: a model not "
                    "known by name, measured by a worker; unmeasured: not measured yet (the provider did not answer), 220 meanwhile."
                ),
            )
            model_check = ModelCheckSerializer()

        agent = serializers.CharField()
        files = serializers.IntegerField()
        chunks = serializers.IntegerField()
        pending = serializers.IntegerField()
        awaiting_vectors = serializers.IntegerField()
        failed = serializers.IntegerField()
        failed_jobs = serializers.IntegerField()
        class EmbeddingBatchSerializer(serializers.Serializer):
            id = serializers.IntegerField()
            provider = serializers.CharField()
            remote_id = serializers.CharField(help_text="The provider's batch id (empty while it is being submitted).")
            state = serializers.ChoiceField(choices=["submitting", "in_flight"])
            inputs = serializers.IntegerField(help_text="Texts in the batch.")
            submitted_at = serializers.DateTimeField()
            job = serializers.IntegerField(allow_null=True)

        embedding = EmbeddingSerializer()
        embedding_batches = EmbeddingBatchSerializer(
            many=True,
            help_text="Batches of this agent's texts in flight at the provider's batch API (half price, results within "
            "its window, up to 24 h). Their files are keyword-searchable meanwhile and count in awaiting_vectors.",
        )
        class MemoryWordsSerializer(serializers.Serializer):
            words = serializers.IntegerField(help_text="Words of the memory read for keyword expansion.")
            embedded = serializers.IntegerField(help_text="Of these, the words with a vector of the configured model.")

        memory_words = MemoryWordsSerializer(
            help_text="The memory's words for keyword expansion (search): read and embedded by a periodic task "
            "after indexing; a search expands with the embedded ones."
        )
        last_indexed_at = serializers.DateTimeField(allow_null=True)

    def get(self, request):
        status = agent_index_status(agent=request.user)
        return Response(self.OutputSerializer({"agent": request.user.slug, **status}).data)


# --- Shared pieces -------------------------------------------------------------------------------


class RawContent(bytes):
    """A request body taken as the file itself (any non-JSON content type)."""


class RawTextParser(BaseParser):
    """``PUT files/<path>`` with a raw body: text/plain, text/markdown, application/octet-stream, or
    anything else that is not JSON. The view checks it is UTF-8 text."""

    media_type = "*/*"

    def parse(self, stream, media_type=None, parser_context=None):
        return RawContent(stream.read() if stream is not None else b"")


class TextContentField(serializers.Field):
    """File content as given: no trimming, and NUL or invalid text is left to the service (→ 415)."""

    default_error_messages = {"invalid": "content must be a string."}

    def to_internal_value(self, value):
        if not isinstance(value, str):
            self.fail("invalid")
        return value

    def to_representation(self, value):
        return value


class BodyLimitMixin:
    """Refuse an oversized body from its Content-Length, after authentication, before reading it."""

    def max_body_bytes(self) -> int:
        raise NotImplementedError

    body_too_large_code = "request_too_large"

    def check_permissions(self, request):
        # After authentication, before the permission checks: a signed write's check reads the body.
        self._check_body_length(request)
        super().check_permissions(request)

    def _check_body_length(self, request) -> None:
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            raise ApiError(status_code=400, code="invalid_request", message="Invalid Content-Length header.") from None
        limit = self.max_body_bytes()
        if length > limit:
            raise ApiError(
                status_code=413,
                code=self.body_too_large_code,
                message=f"The request body has {length} bytes; the limit is {limit} bytes.",
            )


def _file_path(raw: str) -> str:
    return path_normalize(raw)


def _if_match(request) -> str | None:
    """The hash a conditional write expects (``If-Match: "<sha256 hex>"``, the hash the file API
    answers); ``""`` for ``If-Match: ""``, i.e. "only if the file does not exist yet"."""
    value = request.headers.get("If-Match")
    if value is None:
        return None
    value = value.strip().removeprefix("W/").strip('"')
    return hash_normalize(value) if value else ""


IF_MATCH_PARAMETER = OpenApiParameter(
    "If-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description='Write only if the file\'s current hash is this one (`""`: only if the file does not exist); '
    "else 412 `hash_mismatch` with `current_hash`, and nothing is written.",
)


# --- Files ---------------------------------------------------------------------------------------


class FileOutputSerializer(serializers.Serializer):
    path = serializers.CharField()
    hash = serializers.CharField(source="content_hash")
    size = serializers.IntegerField()
    status = serializers.CharField(source="state")
    attributes = serializers.DictField()


class FileUploadApi(BodyLimitMixin, APIView):
    """PUT /api/v1/files/<path> — store a file (raw UTF-8 body, or JSON {"content", "source"?, "mtime"?})."""

    required_scope = "write"
    parser_classes = [BoundedJSONParser, RawTextParser]

    class InputSerializer(StrictSerializer):
        content = TextContentField()
        source = serializers.ChoiceField(choices=MemoryFile.Source.values, required=False, allow_null=True)
        mtime = ClientDatetimeField(required=False, allow_null=True)
        attributes = AttributesField(required=False, allow_null=True)

    class QuerySerializer(serializers.Serializer):
        source = serializers.ChoiceField(choices=MemoryFile.Source.values, required=False)
        mtime = ClientDatetimeField(required=False)

    class OutputSerializer(FileOutputSerializer):
        job = serializers.IntegerField(source="job_id_or_none", allow_null=True)

    def max_body_bytes(self) -> int:
        if self.request.content_type.split(";")[0].strip().lower() == "application/json":
            return 6 * settings.MEMORYHUB_MAX_FILE_BYTES + 64 * 1024  # JSON escapes inflate text
        return settings.MEMORYHUB_MAX_FILE_BYTES

    body_too_large_code = "file_too_large"

    openapi_error_statuses = (412, 413, 415, 422)

    @extend_schema(
        request={
            "application/json": InputSerializer,
            "text/plain": OpenApiTypes.STR,
            "text/markdown": OpenApiTypes.STR,
            "application/octet-stream": OpenApiTypes.BINARY,
        },
        parameters=[QuerySerializer, IF_MATCH_PARAMETER],
        responses={200: OutputSerializer, 201: OutputSerializer},
        description="The body is the file (any non-JSON content type; `source` and `mtime` may then be given in the "
        "query string), or JSON `{content, source?, mtime?, attributes?}` (`attributes` replaces the file's attributes; "
        "left out, they are kept). 201 for a new path, 200 otherwise; `job` is null when "
        "the content is unchanged.",
    )
    def put(self, request, path):
        path = _file_path(path)
        data = request.data
        if isinstance(data, RawContent) or not request.content_type.startswith("application/json"):
            query = self.QuerySerializer(data=request.query_params)
            query.is_valid(raise_exception=True)
            fields = {"content": content_from_bytes(bytes(data) if isinstance(data, RawContent) else b""), **query.validated_data}
        else:
            serializer = self.InputSerializer(data=data)
            serializer.is_valid(raise_exception=True)
            fields = serializer.validated_data
        memory_file, job = file_ingest(
            agent=request.user, path=path, content=fields["content"], source=fields.get("source"), mtime=fields.get("mtime"),
            attributes=fields.get("attributes"), expected_hash=_if_match(request),
        )
        memory_file.job_id_or_none = job.id if job else None
        return Response(
            self.OutputSerializer(memory_file).data,
            status=status.HTTP_201_CREATED if memory_file.was_created else status.HTTP_200_OK,
        )


class FileAppendApi(BodyLimitMixin, APIView):
    """POST /api/v1/files/<path>/append — add text (e.g. new JSONL transcript lines) to the end of a file."""

    required_scope = "write"
    parser_classes = [BoundedJSONParser, RawTextParser]

    class InputSerializer(StrictSerializer):
        text = TextContentField()
        source = serializers.ChoiceField(choices=MemoryFile.Source.values, required=False, allow_null=True)
        mtime = ClientDatetimeField(required=False, allow_null=True)
        attributes = AttributesField(required=False, allow_null=True)

    OutputSerializer = FileUploadApi.OutputSerializer
    QuerySerializer = FileUploadApi.QuerySerializer
    body_too_large_code = "file_too_large"
    openapi_error_statuses = (412, 413, 415, 422)

    def max_body_bytes(self) -> int:
        return FileUploadApi.max_body_bytes(self)

    @extend_schema(
        request={"application/json": InputSerializer, "text/plain": OpenApiTypes.STR},
        parameters=[QuerySerializer, IF_MATCH_PARAMETER],
        responses={200: OutputSerializer, 201: OutputSerializer},
        description="Send only the new text (a raw body, or JSON `{text, source?, mtime?, attributes?}`); it goes on a new line at "
        "the end of the file, which is created when absent (201). Only the chunks whose text changed are embedded again.",
    )
    def post(self, request, path):
        path = _file_path(path)
        data = request.data
        if isinstance(data, RawContent) or not request.content_type.startswith("application/json"):
            query = self.QuerySerializer(data=request.query_params)
            query.is_valid(raise_exception=True)
            fields = {"text": content_from_bytes(bytes(data) if isinstance(data, RawContent) else b""), **query.validated_data}
        else:
            serializer = self.InputSerializer(data=data)
            serializer.is_valid(raise_exception=True)
            fields = serializer.validated_data
        memory_file, job = file_ingest(
            agent=request.user, path=path, append=fields["text"], source=fields.get("source"), mtime=fields.get("mtime"),
            attributes=fields.get("attributes"), expected_hash=_if_match(request),
        )
        memory_file.job_id_or_none = job.id if job else None
        return Response(
            self.OutputSerializer(memory_file).data,
            status=status.HTTP_201_CREATED if memory_file.was_created else status.HTTP_200_OK,
        )


class FilePagination(LimitOffsetPagination):
    default_limit = 100
    max_limit = 1000


class FileListApi(APIView):
    """GET /api/v1/files?prefix=&source=&limit=&offset= — this agent's files, by path."""

    required_scope = "read"
    pagination_class = FilePagination  # documents the page shape; get() paginates explicitly

    class InputSerializer(serializers.Serializer):
        prefix = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
        source = serializers.ChoiceField(choices=MemoryFile.Source.values, required=False)

    class OutputSerializer(FileOutputSerializer):
        source = serializers.CharField()
        mtime = serializers.DateTimeField(source="client_mtime", allow_null=True)
        last_error = serializers.CharField()
        indexed_at = serializers.DateTimeField(allow_null=True)
        updated_at = serializers.DateTimeField()

    def get(self, request):
        serializer = self.InputSerializer(data=request.query_params)
        serializer.is_valid(raise_exception=True)
        files = file_list(
            agent=request.user,
            prefix=prefix_normalize(serializer.validated_data.get("prefix")),
            source=serializer.validated_data.get("source"),
        )
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(files, request, view=self)
        return paginator.get_paginated_response(self.OutputSerializer(page, many=True).data)


class FileGetApi(APIView):
    """GET /api/v1/files/<path>?from=1&lines=50 — memory_get: lines of one file."""

    required_scope = "read"

    class InputSerializer(serializers.Serializer):
        # "from" is a Python keyword, hence the explicit field name.
        start = serializers.IntegerField(min_value=1, max_value=MEMORY_GET_MAX_FROM, default=1)
        lines = serializers.IntegerField(min_value=1, max_value=MEMORY_GET_MAX_LINES, default=MEMORY_GET_DEFAULT_LINES)

    class OutputSerializer(serializers.Serializer):
        path = serializers.CharField()
        start = serializers.IntegerField()
        lines = serializers.IntegerField()
        total_lines = serializers.IntegerField()
        content = serializers.CharField()
        source = serializers.CharField()

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "from", {"type": "integer", "minimum": 1, "maximum": MEMORY_GET_MAX_FROM, "default": 1},
                description="First line, 1-indexed.",
            ),
            OpenApiParameter(
                "lines",
                {"type": "integer", "minimum": 1, "maximum": MEMORY_GET_MAX_LINES, "default": MEMORY_GET_DEFAULT_LINES},
                description="How many lines.",
            ),
        ],
        responses=inline_serializer(
            "MemoryGet",
            {
                "path": serializers.CharField(),
                "from": serializers.IntegerField(),
                "lines": serializers.IntegerField(help_text="Lines returned (fewer at the end of the file)."),
                "total_lines": serializers.IntegerField(),
                "content": serializers.CharField(),
                "source": serializers.CharField(),
                "owner": serializers.CharField(required=False, help_text="The owner agent when read through a grant."),
            },
        ),
        description="memory_get: `lines` lines of one file from line `from`, numbered as search results cite them. "
        "`owner:path` (e.g. `handbook:memory/policies.md`) reads a memory granted to this agent.",
    )
    def get(self, request, path):
        from agents.selectors import memory_path_resolve

        owner, memory, path = memory_path_resolve(reader=request.user, path=path)  # "handbook:memory/x.md"
        path = _file_path(path)
        params = request.query_params.copy()
        if "from" in params:
            params["start"] = params.pop("from")[-1]
        serializer = self.InputSerializer(data=params)
        if not serializer.is_valid():
            errors = {("from" if key == "start" else key): value for key, value in serializer.errors.items()}
            raise serializers.ValidationError(errors)
        result = file_read_lines(
            agent=memory, path=path, start=serializer.validated_data["start"], lines=serializer.validated_data["lines"]
        )
        data = self.OutputSerializer({**result, "start": result["from"]}).data
        data["from"] = data.pop("start")
        answer = {key: data[key] for key in ("path", "from", "lines", "total_lines", "content", "source")}
        if owner is not None:
            answer["owner"] = owner  # read through a grant
        return Response(answer)


class FileDeleteApi(APIView):
    """DELETE /api/v1/files/<path> — delete a file and its chunks now."""

    required_scope = "write"

    class OutputSerializer(serializers.Serializer):
        path = serializers.CharField()
        deleted = serializers.BooleanField()
        chunks_removed = serializers.IntegerField()
        job = serializers.IntegerField()

    openapi_error_statuses = (412,)

    @extend_schema(parameters=[IF_MATCH_PARAMETER])
    def delete(self, request, path):
        path = _file_path(path)
        job = file_delete(agent=request.user, path=path, expected_hash=_if_match(request))
        return Response(
            self.OutputSerializer({"path": path, "deleted": True, "chunks_removed": job.chunks_removed, "job": job.id}).data
        )


# --- Sync webhook --------------------------------------------------------------------------------


class WorkspaceSyncApi(BodyLimitMixin, APIView):
    """POST /api/v1/sync — the webhook: upsert content entries, diff hash-only ones, delete the unlisted."""

    required_scope = "write"
    parser_classes = [BoundedJSONParser]

    class InputSerializer(StrictSerializer):
        class FileSerializer(StrictSerializer):
            path = StrictCharField(trim_whitespace=False)
            content = TextContentField(required=False, allow_null=True)
            hash = StrictCharField(required=False, allow_null=True, allow_blank=True)
            source = serializers.ChoiceField(choices=MemoryFile.Source.values, required=False, allow_null=True)
            mtime = ClientDatetimeField(required=False, allow_null=True)
            attributes = AttributesField(required=False, allow_null=True)

        files = FileSerializer(many=True)
        delete_missing = StrictBooleanField(default=False)
        prefix = StrictCharField(required=False, allow_blank=True, trim_whitespace=False, default="")

    class OutputSerializer(serializers.Serializer):
        job = serializers.IntegerField(source="job.id", allow_null=True, default=None)
        needed = serializers.ListField(child=serializers.CharField())
        unchanged = serializers.IntegerField()
        changed = serializers.IntegerField()
        deleted = serializers.ListField(child=serializers.CharField())

    openapi_error_statuses = (413, 415, 422)

    def max_body_bytes(self) -> int:
        return settings.MEMORYHUB_MAX_SYNC_BYTES

    def post(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        outcome = workspace_sync(
            agent=request.user,
            entries=[SyncEntry(**entry) for entry in data["files"]],
            delete_missing=data["delete_missing"],
            prefix=data["prefix"],
        )
        return Response(self.OutputSerializer(outcome).data)


# --- Jobs ----------------------------------------------------------------------------------------


class JobGetApi(APIView):
    """GET /api/v1/jobs/<id> — what one indexing job did."""

    required_scope = "read"

    class OutputSerializer(serializers.ModelSerializer):
        duration_ms = serializers.SerializerMethodField()

        class Meta:
            model = IndexJob
            fields = [
                "id", "trigger", "state", "files_seen", "files_changed", "files_removed", "chunks_added",
                "chunks_removed", "chunks_embedded", "cache_hits", "malformed_lines", "attempts", "error",
                "created_at", "started_at", "finished_at", "duration_ms",
            ]

        def get_duration_ms(self, job) -> int | None:
            if job.started_at and job.finished_at:
                return round((job.finished_at - job.started_at).total_seconds() * 1000)
            return None

    def get(self, request, job_id: int):
        return Response(self.OutputSerializer(job_get(agent=request.user, job_id=job_id)).data)


# --- Export --------------------------------------------------------------------------------------


class JSONLinesRenderer(JSONRenderer):
    """Lets a client that accepts only ``application/x-ndjson`` have the export (DRF would answer 406).
    The export streams its own lines; what this renders is an error, which is one line of JSON."""

    media_type = "application/x-ndjson"
    format = "json"  # as the other renderer: ?format=json keeps both, and the schema grows no format parameter


class AgentExportApi(APIView):
    """GET /api/v1/export — every file of the token's agent as JSON Lines (docs/operations.md).

    The token decides the agent: there is no parameter naming another one.
    """

    required_scope = "read"
    renderer_classes = [JSONRenderer, JSONLinesRenderer]

    @extend_schema(
        responses={(200, "application/x-ndjson"): OpenApiTypes.STR},
        description="A header line, then one `{path, source, mtime, hash, content}` line per file, by path.",
    )
    def get(self, request):
        from indexing.export import agent_export_lines

        response = StreamingHttpResponse(agent_export_lines(agent=request.user), content_type="application/x-ndjson")
        response["Content-Disposition"] = f'attachment; filename="memoryhub-{request.user.slug}.jsonl"'
        return response
