"""Files, jobs and embedding batches in the admin: view-only pages (the API and the workers are the only
writers) with actions that call the indexing services ("Re-index selected files", "Retry selected jobs")."""

from django.contrib import admin, messages
from django.db.models import BooleanField, Count, ExpressionWrapper, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.http import Http404
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from agents.admin_scoping import TeamScopedAdmin
from agents.models import AuditEvent
from agents.services import Actor, audit_record
from indexing.models import Chunk, EmbeddingBatch, EmbeddingModelCheck, EmbeddingWindow, IndexJob, MemoryFile
from indexing.maintenance import file_reindex, index_job_retry

# The content view shows at most this many lines; memory_get (GET files/<path>?from=&lines=) reads the rest.
CONTENT_VIEW_MAX_LINES = 2000
# The file page lists at most this many chunks, the job page this many files; both say how many more.
CHUNK_VIEW_MAX = 200
JOB_FILES_VIEW_MAX = 50
CHUNK_PREVIEW_CHARS = 160


def _file_chunks(memory_file):
    """A file's chunks, with its agent named: pruned to the agent's partition of the chunk table."""
    return Chunk.objects.filter(agent_id=memory_file.agent_id, file_id=memory_file.pk)


def state_badge(state: str) -> str:
    return format_html('<span class="mh-state mh-state-{}">{}</span>', state, state)


class ReadOnlyAdmin(TeamScopedAdmin, admin.ModelAdmin):
    """Rows written by the API and the workers: operators look and act through actions, never edit; each
    sees only their teams' rows (agents/admin_scoping.py)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(MemoryFile)
class MemoryFileAdmin(ReadOnlyAdmin):
    list_display = ["path", "agent", "source", "status", "size", "chunks", "indexed_at", "error"]
    list_select_related = ["agent"]
    list_filter = ["state", "source"]
    search_fields = ["path", "agent__slug"]
    show_full_result_count = False  # one COUNT(*) fewer on every page of a large table
    actions = ["reindex_selected"]
    fields = [
        "agent", "path", "source", "status", "last_error", "failures", "size", "content_hash", "indexed_hash", "client_mtime",
        "created_at", "updated_at", "indexed_at", "job", "chunk_summary", "chunk_table", "content_view",
    ]
    readonly_fields = fields

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        match = request.resolver_match
        if match is not None and match.url_name == "indexing_memoryfile_changelist":
            # The list never shows the content (up to MEMORYHUB_MAX_FILE_BYTES per row): leave it in Postgres.
            # The count names the row's agent: each run of the subquery reads that agent's partition of
            # the chunk table only (pruned at run time), not every partition's file_id index.
            chunk_count = (
                Chunk.objects.filter(agent_id=OuterRef("agent_id"), file_id=OuterRef("pk"))
                .order_by().values("file_id").annotate(n=Count("id")).values("n")
            )
            queryset = queryset.defer("content").annotate(chunk_count=Coalesce(Subquery(chunk_count), 0))
        return queryset

    @admin.display(description="Status", ordering="state")
    def status(self, memory_file):
        return state_badge(memory_file.state)

    @admin.display(description="Chunks", ordering="chunk_count")
    def chunks(self, memory_file):
        return memory_file.chunk_count

    @admin.display(description="Last error")
    def error(self, memory_file):
        return (memory_file.last_error[:120] + "…") if len(memory_file.last_error) > 120 else memory_file.last_error

    @admin.display(description="Chunks")
    def chunk_summary(self, memory_file):
        counts = _file_chunks(memory_file).aggregate(
            total=Count("id"), vectors=Count("id", filter=Q(embedding__isnull=False))
        )
        identities = list(
            _file_chunks(memory_file)
            .exclude(embedding_identity="")
            .order_by("embedding_identity")  # not Chunk's default ordering, which would defeat DISTINCT
            .values_list("embedding_identity", flat=True)
            .distinct()
        )
        return f"{counts['total']} chunks, {counts['vectors']} with a vector" + (f" ({', '.join(identities)})" if identities else "")

    @admin.display(description="Chunks and vectors")
    def chunk_table(self, memory_file):
        """Each chunk: its lines (as search results cite them), tokens, vector (identity and dimensions, or
        none: keyword search only) and the start of its text."""
        total = _file_chunks(memory_file).count()
        if not total:
            return "—"
        chunks = (
            _file_chunks(memory_file)
            .order_by("ordinal")
            .defer("search_text", "embedding")
            .annotate(has_vector=ExpressionWrapper(Q(embedding__isnull=False), output_field=BooleanField()))[:CHUNK_VIEW_MAX]
        )
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}–{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    chunk.ordinal, chunk.start_line, chunk.end_line, chunk.token_count,
                    f"{chunk.embedding_identity} ({chunk.embedding_dimensions} dimensions)" if chunk.has_vector
                    else "none (keyword search only)",
                    _preview(chunk.text),
                )
                for chunk in chunks
            ),
        )
        more = ""
        if total > CHUNK_VIEW_MAX:
            more = format_html('<p class="help">… and {} more chunks (first {} of {} shown).</p>', total - CHUNK_VIEW_MAX, CHUNK_VIEW_MAX, total)
        return format_html(
            '<table class="mh-table" id="chunk-table"><thead><tr><th>#</th><th>Lines</th><th>Tokens</th><th>Vector</th>'
            "<th>Text</th></tr></thead><tbody>{}</tbody></table>{}",
            rows, more,
        )

    @admin.display(description="Content")
    def content_view(self, memory_file):
        lines = memory_file.content.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        shown = lines[:CONTENT_VIEW_MAX_LINES]
        # Numbered as the chunker and memory_get number them, so search results' line ranges can be read here.
        body = format_html_join("\n", '<span class="mh-lineno">{}</span>{}', ((n, line) for n, line in enumerate(shown, 1)))
        more = ""
        if len(lines) > len(shown):
            more = format_html(
                '<p class="help">First {} of {} lines; read the rest with GET /api/v1/files/{}?from={}.</p>',
                len(shown), len(lines), memory_file.path, len(shown) + 1,
            )
        return format_html('<pre class="mh-content">{}</pre>{}', body, more)

    @admin.action(description="Re-index selected files", permissions=["operate"])
    def reindex_selected(self, request, queryset):
        by_agent: dict = {}
        for memory_file in self.managed(request, queryset).select_related("agent").only("id", "agent"):
            by_agent.setdefault(memory_file.agent, []).append(memory_file.pk)
        jobs = [file_reindex(agent=agent, file_ids=file_ids) for agent, file_ids in by_agent.items()]
        count = sum(len(ids) for ids in by_agent.values())
        actor = Actor.from_request(request)
        for (agent, file_ids), job in zip(by_agent.items(), jobs):
            audit_record(
                action=AuditEvent.Action.FILES_REINDEXED, actor=actor, team_ids=[agent.team_id], agent=agent,
                target=f"{len(file_ids)} file(s)", file_ids=file_ids, job_id=job.pk if job else None,
            )
        self.message_user(
            request,
            f"{count} file(s) queued for re-indexing in {len(jobs)} job(s): {', '.join(str(j.pk) for j in jobs if j)}.",
            messages.SUCCESS,
        )


@admin.register(IndexJob)
class IndexJobAdmin(ReadOnlyAdmin):
    list_display = [
        "id", "agent", "trigger", "status", "files", "chunks", "cache_hits", "attempts", "waited", "duration",
        "created_at", "error_short",
    ]
    list_select_related = ["agent"]
    list_filter = ["state", "trigger"]
    search_fields = ["agent__slug", "error"]
    show_full_result_count = False
    actions = ["retry_selected"]
    fields = [
        "agent", "trigger", "status", "attempts", "error", "created_at", "started_at", "finished_at", "waited",
        "duration", "files_seen", "files_changed", "files_removed", "chunks_added", "chunks_removed",
        "chunks_embedded", "cache_hits", "malformed_lines", "job_files",
    ]
    readonly_fields = fields

    @admin.display(description="Status", ordering="state")
    def status(self, job):
        return state_badge(job.state)

    @admin.display(description="Files seen / changed / removed")
    def files(self, job):
        return f"{job.files_seen} / {job.files_changed} / {job.files_removed}"

    @admin.display(description="Chunks added / removed / embedded")
    def chunks(self, job):
        return f"{job.chunks_added} / {job.chunks_removed} / {job.chunks_embedded}"

    @admin.display(description="Queued for")
    def waited(self, job):
        if job.started_at is None:
            return "—"
        return _seconds(job.started_at - job.created_at)

    @admin.display(description="Duration")
    def duration(self, job):
        if job.started_at is None or job.finished_at is None:
            return "—"
        return _seconds(job.finished_at - job.started_at)

    @admin.display(description="Error")
    def error_short(self, job):
        return (job.error[:120] + "…") if len(job.error) > 120 else job.error

    @admin.display(description="Files of this job")
    def job_files(self, job):
        """The files whose latest job this is. A file remembers only its latest job: a later upload or
        re-index takes it over, and the page says so instead of showing an unexplained empty list."""
        attached = MemoryFile.objects.filter(job=job)
        total = attached.count()
        if not total:
            if job.files_seen or job.files_changed:
                return format_html(
                    '<p class="help" id="job-files-moved">None any more: this job\'s files have been taken over by later '
                    "jobs since (a file keeps only its latest job). The counts above are this job's own; "
                    '<a href="{}?agent__id__exact={}">the agent\'s jobs</a> show what happened next.</p>',
                    reverse("admin:indexing_indexjob_changelist"), job.agent_id,
                )
            return "—"
        files = attached.only("id", "path", "state").order_by("path")[:JOB_FILES_VIEW_MAX]
        listing = format_html_join(
            "", '<div><a href="{}">{}</a> {}</div>',
            ((reverse("admin:indexing_memoryfile_change", args=[f.pk]), f.path, state_badge(f.state)) for f in files),
        )
        if total <= JOB_FILES_VIEW_MAX:
            return listing
        return format_html(
            '{}<p class="help" id="job-files-more">… and {} more: <a href="{}?job__id__exact={}">all {} files of this job</a>.</p>',
            listing, total - JOB_FILES_VIEW_MAX, reverse("admin:indexing_memoryfile_changelist"), job.pk, total,
        )

    @admin.action(description="Retry selected failed jobs", permissions=["operate"])
    def retry_selected(self, request, queryset):
        queryset = self.managed(request, queryset)
        retried = []
        actor = Actor.from_request(request)
        for job in queryset.filter(state=IndexJob.State.FAILED).select_related("agent"):
            if index_job_retry(job=job):
                retried.append(job.pk)
                audit_record(
                    action=AuditEvent.Action.JOBS_RETRIED, actor=actor, team_ids=[job.agent.team_id], agent=job.agent,
                    target=f"job {job.pk}", job_id=job.pk,
                )
        skipped = queryset.count() - len(retried)
        message = f"{len(retried)} job(s) queued again" + (f": {', '.join(map(str, retried))}" if retried else "")
        if skipped:
            message += f"; {skipped} skipped (only failed jobs can be retried)"
        self.message_user(request, message + ".", messages.SUCCESS if retried else messages.WARNING)


@admin.register(EmbeddingBatch)
class EmbeddingBatchAdmin(ReadOnlyAdmin):
    """Batches at the providers' batch APIs: those in flight (their jobs wait), and how the finished ones
    ended — a failed or expired batch says why; its texts were embedded synchronously."""

    list_display = ["id", "agent", "job", "provider", "remote_id", "status", "inputs", "collected", "remote_status", "created_at", "finished_at", "error_short"]
    list_select_related = ["agent"]
    list_filter = ["state", "provider"]
    search_fields = ["remote_id", "agent__slug"]
    show_full_result_count = False
    raw_id_fields = ["job", "agent"]
    fields = [
        "agent", "job", "provider", "model", "dimensions", "status", "remote_id", "remote_status", "inputs", "collected",
        "error", "created_at", "polled_at", "finished_at",
    ]
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).defer("text_hashes", "file_ids")  # up to 50,000 hashes a row

    @admin.display(description="Status", ordering="state")
    def status(self, batch):
        return state_badge(batch.state)

    @admin.display(description="Error")
    def error_short(self, batch):
        return (batch.error[:120] + "…") if len(batch.error) > 120 else batch.error


class DeploymentRowAdmin(admin.ModelAdmin):
    """Rows that belong to the deployment, not to a team (a model's measured window, the model check):
    superusers only, read-only; a superuser may delete a row."""

    def has_module_permission(self, request):
        return request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return request.user.is_superuser

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser

    def get_object(self, request, object_id, from_field=None):
        # For an operator a row is a 404, as another team's rows are (agents/admin_scoping.py), not a 403.
        if not request.user.is_superuser:
            raise Http404("No such object.")
        return super().get_object(request, object_id, from_field)


@admin.register(EmbeddingWindow)
class EmbeddingWindowAdmin(DeploymentRowAdmin):
    """The windows measured for models not known by name (indexing/window_probe.py). Deleting a row has
    the model measured again at the next indexing (processes read the row again within
    window_probe.FOUND_RECHECK_SECONDS)."""

    list_display = ["identity", "endpoint", "tokens", "read_tokens", "cut", "measured_at"]
    readonly_fields = list_display


@admin.register(EmbeddingModelCheck)
class EmbeddingModelCheckAdmin(DeploymentRowAdmin):
    """The last check that the model behind each name still gives the index's vectors
    (indexing/model_check.py). "changed": set MEMORYHUB_EMBEDDING_REVISION to a new value and restart, and
    every chunk is embedded again."""

    list_display = [
        "identity", "endpoint", "state", "checked_at", "compared", "differed", "lowest_similarity", "changed_since",
    ]
    readonly_fields = [*list_display, "error"]


def _preview(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= CHUNK_PREVIEW_CHARS else text[:CHUNK_PREVIEW_CHARS] + "…"


def _seconds(delta) -> str:
    seconds = delta.total_seconds()
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"
