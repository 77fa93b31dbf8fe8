"""Memory files, their chunks, the shared embedding cache and indexing jobs.

A file's full text is stored (the index is derived and can always be rebuilt from it). Every row
carries its agent so that every query can be scoped to one tenant, and so the database could later be
sharded by agent without a redesign.
"""

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import Q
from pgvector.django import VectorField

from agents.models import Agent
from indexing.keyword_document import KEYWORD_CONFIG
from memoryhub.fields import DATE_MAX, DATE_MIN


class IndexJob(models.Model):
    """One unit of background indexing work (an upload, a sync, a re-index…) and what it did."""

    class Trigger(models.TextChoices):
        UPLOAD = "upload"
        SYNC = "sync"
        REINDEX = "reindex"
        DELETE = "delete"
        SCHEDULE = "schedule"

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        # Its embeddings are in a provider's batch (EmbeddingBatch); queued again once it is collected.
        WAITING = "waiting"
        DONE = "done"
        FAILED = "failed"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="jobs", db_index=False)
    trigger = models.CharField(max_length=16, choices=Trigger.choices)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    files_seen = models.PositiveIntegerField(default=0)
    files_changed = models.PositiveIntegerField(default=0)
    files_removed = models.PositiveIntegerField(default=0)
    chunks_added = models.PositiveIntegerField(default=0)
    chunks_removed = models.PositiveIntegerField(default=0)
    chunks_embedded = models.PositiveIntegerField(default=0)
    cache_hits = models.PositiveIntegerField(default=0)
    malformed_lines = models.PositiveIntegerField(default=0)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The outbox: set when the job's task could not be published (broker down); indexing/recovery.py
    # publishes it again once the broker answers.
    awaiting_dispatch = models.BooleanField(default=False, db_default=False)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # GET jobs for one agent, newest first (admin, status).
            models.Index(fields=["agent", "-created_at"], name="indexjob_agent_created_idx"),
            # The periodic task's "queued, running or failed jobs" scan stays small as jobs pile up.
            models.Index(
                fields=["state", "created_at"],
                name="indexjob_unfinished_idx",
                condition=Q(state__in=["queued", "running", "failed"]),
            ),
            # The outbox drain's scan: only the few jobs whose task was never published.
            models.Index(fields=["created_at"], name="indexjob_awaiting_dispatch_idx", condition=Q(awaiting_dispatch=True)),
        ]

    def __str__(self) -> str:
        return f"job {self.pk} ({self.trigger}, {self.state})"


class MemoryFile(models.Model):
    """One file of an agent's workspace, as last pushed."""

    class Source(models.TextChoices):
        MEMORY = "memory"  # MEMORY.md, memory.md, memory/**/*.md
        SESSION = "session"  # *.jsonl conversation transcripts
        WORKSPACE = "workspace"  # other text files

    class State(models.TextChoices):
        PENDING = "pending"  # content accepted, not yet searchable
        INDEXING = "indexing"
        INDEXED = "indexed"
        FAILED = "failed"  # see last_error; keyword search may still find it

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="files", db_index=False)
    path = models.CharField(max_length=1024)
    source = models.CharField(max_length=16, choices=Source.choices)
    content = models.TextField()
    content_hash = models.CharField(max_length=64)
    size = models.PositiveBigIntegerField(help_text="Bytes of UTF-8 content.")
    client_mtime = models.DateTimeField(null=True, blank=True)
    # The user's key/value pairs (indexing/attributes.py): metadata search filters on, never indexed text.
    attributes = models.JSONField(default=dict, db_default={}, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    # content_hash of the version whose chunks are in the index ("" before the first indexing).
    indexed_hash = models.CharField(max_length=64, blank=True)
    last_error = models.TextField(blank=True)
    # Failed indexing attempts of this content in a row: the periodic retry waits longer after each and
    # stops at MEMORYHUB_INDEX_FAILED_MAX_ATTEMPTS. New content, a success or a re-index resets it.
    failures = models.PositiveIntegerField(default=0, db_default=0)
    job = models.ForeignKey(
        IndexJob, on_delete=models.SET_NULL, null=True, blank=True, related_name="files", db_index=False
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    indexed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["path"]
        constraints = [
            # Serves every lookup by (agent, path): PUT/GET/DELETE files/<path> and sync diffs.
            models.UniqueConstraint(fields=["agent", "path"], name="memoryfile_agent_path_uniq"),
            # What the chunk table's foreign key references: (agent_id, file_id), see Chunk.file.
            models.UniqueConstraint(fields=["agent", "id"], name="memoryfile_agent_id_uniq"),
            # A client's date that Python could not read back would break every page listing the row
            # (memoryhub/fields.py validates input to the same range; this holds whatever writes it).
            models.CheckConstraint(
                condition=models.Q(client_mtime__isnull=True)
                | models.Q(client_mtime__gte=DATE_MIN, client_mtime__lt=DATE_MAX),
                name="memoryfile_client_mtime_range",
            ),
        ]
        indexes = [
            # status.pending / status.failed counts and the admin's per-agent state filters.
            models.Index(fields=["agent", "state"], name="memoryfile_agent_state_idx"),
            # "Files of this job" (job detail, admin) and SET NULL when old jobs are pruned.
            models.Index(fields=["job"], name="memoryfile_job_idx"),
        ]

    def __str__(self) -> str:
        return self.path


class Chunk(models.Model):
    """A span of lines of one file: the unit that is embedded, keyword-indexed and returned by search."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="chunks", db_index=False)  # denormalised
    # A file's chunks are deleted by whoever deletes the file, with the agent named (indexing/writes.py,
    # `files_remove`; an agent's go with it through Chunk.agent), never by Django's cascade, which would send
    # ``DELETE … WHERE file_id IN (…)``: planned and locked on every partition of the table. The database
    # still refuses an orphan: instead of the one-column key Django would declare, migration indexing/0008
    # adds FOREIGN KEY (agent_id, file_id) REFERENCES indexing_memoryfile (agent_id, id), deferred, whose
    # check when a file is deleted (``… WHERE agent_id = $1 AND file_id = $2``) is pruned to one partition
    # too (at every run: plan_cache_mode, memoryhub/settings.py); a file deleted with chunks left fails at commit.
    file = models.ForeignKey(
        MemoryFile, on_delete=models.DO_NOTHING, db_constraint=False, related_name="chunks", db_index=False
    )
    ordinal = models.PositiveIntegerField(help_text="Position of the chunk within its file.")
    start_line = models.PositiveIntegerField()  # 1-indexed, inclusive
    end_line = models.PositiveIntegerField()  # 1-indexed, inclusive
    text = models.TextField()
    text_hash = models.CharField(max_length=64)
    token_count = models.PositiveIntegerField()
    # What the keyword index sees: the text plus anything the parser cannot segment on its own
    # (CJK bigrams, see indexing/keyword_document.py). Written by the indexer next to `text`.
    search_text = models.TextField(default="")
    search_vector = models.GeneratedField(
        expression=SearchVector("search_text", config=KEYWORD_CONFIG),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    # Dimension-less on purpose: the dimension is part of the index identity, not of the schema, so a
    # model change needs no ALTER TABLE. HNSW indexes are per agent and per dimension, over the
    # expression embedding::vector(N) (search/vector_index.py).
    embedding = VectorField(null=True, blank=True)
    embedding_identity = models.CharField(max_length=255, blank=True, help_text="provider:model:dimensions")
    embedding_dimensions = models.PositiveSmallIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["file_id", "ordinal"]
        indexes = [
            # Keyword half of search: tsvector @@ tsquery.
            GinIndex(fields=["search_vector"], name="chunk_search_vector_gin"),
            # Exact vector search for small agents and "chunks of this agent under this identity"
            # (status counts, re-embedding after a model change).
            models.Index(fields=["agent", "embedding_identity"], name="chunk_agent_identity_idx"),
            # A file's chunk set in order: re-indexing diffs and memory_get's chunk lookups.
            models.Index(fields=["file", "ordinal"], name="chunk_file_ordinal_idx"),
            # The indexer's "reuse an existing chunk with this text" lookup within an agent.
            models.Index(fields=["agent", "text_hash"], name="chunk_agent_text_hash_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.file_id}:{self.start_line}-{self.end_line}"


class EmbeddingCache(models.Model):
    """text → vector for one embedding identity, in one agent's cache (text is never stored here).

    Each agent has a cache of its own (MEMORYHUB_EMBEDDING_CACHE_SCOPE=agent, the default): a shared one
    would tell an agent, through its job's cache hits or its time, whether another tenant's memory holds
    a text it guesses. ``shared`` puts every agent's rows in one cache (``agent_scope`` 0)."""

    provider = models.CharField(max_length=32)
    model = models.CharField(max_length=200)  # with its revision: EmbeddingIdentity.model_version
    dimensions = models.PositiveSmallIntegerField()
    # The agent whose cache the row is in (its id; no foreign key: the agent's deletion removes its rows
    # in batches, agents/deletion.py), or 0 for the shared cache.
    agent_scope = models.BigIntegerField(default=0)
    text_hash = models.CharField(max_length=64)
    embedding = VectorField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # The cache lookup itself: (identity, whose cache, sha256 of the text).
            models.UniqueConstraint(
                fields=["provider", "model", "dimensions", "agent_scope", "text_hash"],
                name="embeddingcache_identity_scope_hash_uniq",
            ),
        ]
        indexes = [
            # An agent's deletion finds its rows by this (agents/deletion.py).
            models.Index(fields=["agent_scope"], name="embeddingcache_agent_scope_idx", condition=~models.Q(agent_scope=0)),
        ]


class EmbeddingWindow(models.Model):
    """The input window measured for a model the service does not know by name (indexing/window_probe.py),
    one row per identity and endpoint. Chunks and query windows are cut to it; delete the row to measure
    again (every process reads it again within window_probe.FOUND_RECHECK_SECONDS)."""

    identity = models.CharField(max_length=255, help_text="provider:model:dimensions")
    endpoint = models.CharField(max_length=500, blank=True, help_text="The provider's base URL, if set.")
    tokens = models.PositiveIntegerField(help_text="cl100k tokens a chunk may hold: every one of them is read by the model.")
    read_tokens = models.PositiveIntegerField(help_text="Tokens of the probe text the model read whole.")
    cut = models.BooleanField(help_text="Whether the model cut the probe text (else it read the provider's whole window).")
    measured_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["identity", "endpoint"], name="embeddingwindow_identity_uniq")]

    def __str__(self) -> str:
        return f"{self.identity} at {self.endpoint or 'the default endpoint'}: {self.tokens} tokens"


class EmbeddingModelCheck(models.Model):
    """The last check that the model behind the configured name still gives the index's vectors
    (indexing/model_check.py), one row per identity and endpoint."""

    identity = models.CharField(max_length=255, help_text="provider:model:dimensions")
    endpoint = models.CharField(max_length=500, blank=True, help_text="The provider's base URL, if set.")
    checked_at = models.DateTimeField(
        null=True, blank=True, help_text="The last check, whether it could compare or not."
    )
    compared = models.PositiveIntegerField(
        default=0, help_text="Chunks whose vector the last comparison embedded again."
    )
    differed = models.PositiveIntegerField(
        default=0, help_text="Of those, chunks whose stored vector another model made."
    )
    lowest_similarity = models.FloatField(
        null=True, blank=True, help_text="The lowest cosine similarity of a new vector with its stored one."
    )
    changed_since = models.DateTimeField(
        null=True, blank=True,
        help_text="The first check of the change the last comparison found; empty when it found none.",
    )
    error = models.TextField(blank=True, help_text="Why the last check could not compare (the provider failed).")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["identity", "endpoint"], name="embeddingmodelcheck_identity_uniq"),
        ]

    @property
    def state(self) -> str:
        """"changed", "same", "failed" (never compared: the provider failed) or "unchecked"."""
        if self.differed:
            return "changed"
        if self.compared:
            return "same"
        return "failed" if self.error else "unchecked"

    def __str__(self) -> str:
        return f"{self.identity} at {self.endpoint or 'the default endpoint'}: {self.state}"


class EmbeddingBatch(models.Model):
    """Texts of one indexing pass sent to a provider's asynchronous batch API (OpenAI /v1/batches,
    Gemini asyncBatchEmbedContent) at half the price, collected later by the periodic task
    (indexing/embedding_batches.py). The row is written before the provider is asked and holds the
    provider's batch id as soon as it exists, so a worker that dies never loses a batch."""

    class State(models.TextChoices):
        # The row exists; the provider's id is stored as soon as it answers. in_flight once the job waits.
        SUBMITTING = "submitting"
        IN_FLIGHT = "in_flight"  # the provider holds it; polled every MEMORYHUB_EMBEDDING_BATCH_API_POLL_INTERVAL
        DONE = "done"  # every vector collected into the EmbeddingCache
        PARTIAL = "partial"  # collected, some inputs without a vector (expired or failed lines): embedded synchronously
        FAILED = "failed"  # failed, expired or cancelled with nothing usable: embedded synchronously

    job = models.ForeignKey(
        IndexJob, on_delete=models.SET_NULL, null=True, blank=True, related_name="embedding_batches", db_index=False
    )
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="embedding_batches", db_index=False)
    provider = models.CharField(max_length=32)
    model = models.CharField(max_length=200)  # with its revision: EmbeddingIdentity.model_version
    dimensions = models.PositiveSmallIntegerField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.SUBMITTING)
    remote_id = models.CharField(max_length=255, blank=True, help_text="The provider's batch id.")
    remote_status = models.CharField(max_length=64, blank=True, help_text="The provider's last word on it.")
    # The sha256 of each text, in submission order: the custom_id (OpenAI) or metadata key (Gemini) of
    # each request, and the EmbeddingCache key its vector is stored under. No text is stored here.
    text_hashes = models.JSONField(default=list)
    file_ids = models.JSONField(default=list)
    inputs = models.PositiveIntegerField(default=0)
    collected = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    polled_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # The collector's scan and status's "batches in flight": only the few unfinished rows.
            models.Index(
                fields=["agent", "created_at"], name="embeddingbatch_unfinished_idx",
                condition=Q(state__in=["submitting", "in_flight"]),
            ),
            # "Has this job had a batch?" (its rerun embeds synchronously) and SET NULL when jobs are pruned.
            models.Index(fields=["job"], name="embeddingbatch_job_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.provider} batch {self.remote_id or self.pk} ({self.state})"
