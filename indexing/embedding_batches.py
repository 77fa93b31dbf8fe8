"""Batch embedding: bulk work through the providers' asynchronous batch APIs, at half the price.

An indexing pass of a bulk job (``sync`` or ``reindex``: the first index of a large sync, re-embedding
after a model change, an operator's re-index) that needs at least MEMORYHUB_EMBEDDING_BATCH_API_THRESHOLD
new embeddings does not call the provider synchronously:

1. ``embedding_batch_submit`` writes an ``EmbeddingBatch`` row (the texts' hashes, the files), then
   sends the texts to the provider — OpenAI: a JSONL file uploaded to ``/v1/files`` (purpose
   ``batch``), then ``/v1/batches`` for ``/v1/embeddings`` with a 24 h window; Gemini:
   ``models/{model}:asyncBatchEmbedContent`` with the requests inlined — and stores the provider's
   batch id on the row. Then one transaction sets the row ``in_flight``, the files back to ``pending``
   (their chunks are written: keyword search finds them) and the job to ``waiting``.
2. ``embedding_batches_collect`` (beat, every MEMORYHUB_EMBEDDING_BATCH_API_POLL_INTERVAL seconds)
   polls each batch in flight. A finished batch's vectors go into the agent's EmbeddingCache, and once
   every batch of the job is finished the job is queued again: its rerun finds every vector in the
   cache (each chunk embedded once, no provider call) and settles the files. A failed, cancelled or
   expired batch is recorded with the provider's reason; the rerun embeds whatever the batch did not
   return synchronously (a job embeds through a batch once; its rerun never waits on another).

Nothing is lost when a worker dies: before the provider is asked the row exists, the provider's id is
stored as soon as it answers, and the files and the job wait only once it is; the collector is any
worker's periodic task. A worker that dies before the files wait leaves them ``indexing``: their lease
runs out and the job runs again (that pass is sent again; the unused row, still ``submitting``, is
marked failed after MEMORYHUB_INDEX_STUCK_AFTER).
"""

from __future__ import annotations

import json
import logging
import math
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from indexing.embedding_cache import cache_row
from indexing.embeddings import EmbeddingProvider, ProviderError, ProviderPermanentError, ProviderTransientError, Vector
from indexing.models import EmbeddingBatch, EmbeddingCache, IndexJob, MemoryFile

logger = logging.getLogger(__name__)

BatchState = EmbeddingBatch.State
JobState = IndexJob.State

# Jobs whose passes may go through a batch: bulk work. Uploads (and the sweeps' retries) stay synchronous.
BULK_TRIGGERS = (IndexJob.Trigger.SYNC, IndexJob.Trigger.REINDEX)
UNFINISHED = (BatchState.SUBMITTING, BatchState.IN_FLIGHT)
# Requests per batch: OpenAI takes 50,000 per batch file; Gemini's inlined requests must stay under
# 20 MB, about 5,000 chunks of 400 tokens with their JSON.
MAX_REQUESTS = {"openai": 50_000, "gemini": 5_000}
# Both providers end a batch within 24 h (expired at worst); a batch polled in vain for longer than
# this is given up on, and its texts are embedded synchronously.
GIVE_UP_AFTER = timedelta(hours=26)
FILE_TRANSFER_TIMEOUT = 600.0  # seconds


@dataclass
class BatchPoll:
    """What the provider says about a batch. ``finished``: it will not change any more; ``vectors``
    and ``errors`` by text hash (the custom_id / metadata key of each request)."""

    status: str
    finished: bool = False
    failed: str = ""  # the whole batch failed, expired or was cancelled: why
    vectors: dict[str, Vector] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


# --- the two APIs ---------------------------------------------------------------------------------


class OpenAIBatchAPI:
    """OpenAI's Batch API through the official SDK (the provider's client: OPENAI_BASE_URL, the key)."""

    PENDING = {"validating", "in_progress", "finalizing", "cancelling"}

    def __init__(self, provider) -> None:
        self.provider = provider
        self.client = provider.client
        # A batch file is up to 50,000 texts (tens of MB): its upload and download get longer than a request.
        self.files = provider.client.with_options(timeout=max(FILE_TRANSFER_TIMEOUT, provider.client.timeout or 0)).files

    def submit(self, *, texts: list[str], keys: list[str], label: str) -> str:
        import openai

        inputs, _ = self.provider._prepared(texts)
        lines = [
            json.dumps({
                "custom_id": key, "method": "POST", "url": "/v1/embeddings",
                "body": {"model": self.provider.identity.model, "input": text, "encoding_format": "float", **self.provider.extra},
            })
            for key, text in zip(keys, inputs)
        ]
        data = ("\n".join(lines) + "\n").encode()
        try:
            uploaded = self.files.create(file=(f"{label}.jsonl", data, "application/jsonl"), purpose="batch")
            batch = self.client.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h", metadata={"memoryhub": label}
            )
        except openai.OpenAIError as exc:
            raise _provider_error(exc, "submitting an openai batch") from None
        return batch.id

    def poll(self, remote_id: str) -> BatchPoll:
        import openai

        try:
            batch = self.client.batches.retrieve(remote_id)
            if batch.status in self.PENDING:
                return BatchPoll(status=batch.status)
            poll = BatchPoll(status=batch.status, finished=True)
            if batch.output_file_id:
                self._read(self.files.content(batch.output_file_id).text, poll)
            if batch.error_file_id:
                self._read(self.files.content(batch.error_file_id).text, poll)
        except openai.OpenAIError as exc:
            raise _provider_error(exc, f"polling openai batch {remote_id}") from None
        if batch.status != "completed":
            errors = getattr(getattr(batch, "errors", None), "data", None) or []
            reasons = "; ".join(str(e.message) for e in errors if getattr(e, "message", None))
            poll.failed = f"openai batch {batch.status}" + (f": {reasons}" if reasons else "")
        return poll

    def cancel(self, remote_id: str) -> None:
        import openai

        try:
            self.client.batches.cancel(remote_id)
        except openai.OpenAIError as exc:
            raise _provider_error(exc, f"cancelling openai batch {remote_id}") from None

    def _read(self, text: str, poll: BatchPoll) -> None:
        """Output and error files: one JSON line per request, ``custom_id`` and ``response`` (status_code,
        body) or ``error``."""
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                key = item["custom_id"]
                response = item.get("response") or {}
                if response.get("status_code") == 200:
                    poll.vectors[key] = [float(v) for v in response["body"]["data"][0]["embedding"]]
                    continue
                error = item.get("error") or (response.get("body") or {}).get("error") or {}
                poll.errors[key] = str(error.get("message") or f"HTTP {response.get('status_code')}")
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                logger.warning("openai batch: an unreadable result line (%s: %s)", exc.__class__.__name__, exc)


class GeminiBatchAPI:
    """Gemini's batch mode over HTTP: ``models/{model}:asyncBatchEmbedContent`` with inlined requests
    (each with ``metadata.key``), then ``GET {name}`` until the operation is done; the vectors are in
    ``response.inlinedResponses.inlinedResponses`` (an ``EmbedContentBatchOutput``), in input order."""

    PENDING = {"BATCH_STATE_PENDING", "BATCH_STATE_RUNNING", "BATCH_STATE_UNSPECIFIED", ""}

    def __init__(self, provider) -> None:
        self.provider = provider

    def submit(self, *, texts: list[str], keys: list[str], label: str) -> str:
        inputs, _ = self.provider._prepared(texts)
        model = self.provider._model_path()
        body = {
            "batch": {
                "model": model,
                "displayName": label,
                "inputConfig": {"requests": {"requests": [
                    {"request": self.provider._one(text, query=False), "metadata": {"key": key}}
                    for key, text in zip(keys, inputs)
                ]}},
            }
        }
        url = f"{self.provider.base_url}/{urllib.parse.quote(model)}:asyncBatchEmbedContent"
        operation = self._call(url, body, what="submitting a gemini batch")
        name = operation.get("name") if isinstance(operation, dict) else None
        if not name:
            raise ProviderTransientError("gemini answered a batch submission without a batch name")
        return str(name)

    def poll(self, remote_id: str) -> BatchPoll:
        from indexing.embedding_http import _normalised

        operation = self._call(f"{self.provider.base_url}/{remote_id}", None, what=f"polling gemini batch {remote_id}")
        metadata = operation.get("metadata") or {}
        state = str(metadata.get("state") or "")
        if not operation.get("done") and state in self.PENDING:
            return BatchPoll(status=state or "BATCH_STATE_PENDING")
        poll = BatchPoll(status=state, finished=True)
        output = operation.get("response") or metadata.get("output") or {}
        responses = (output.get("inlinedResponses") or {}).get("inlinedResponses") or []
        for item in responses:
            key = (item.get("metadata") or {}).get("key")
            if not key:
                continue
            if item.get("error"):
                poll.errors[key] = str(item["error"].get("message") or item["error"])
                continue
            try:
                poll.vectors[key] = _normalised([float(v) for v in item["response"]["embedding"]["values"]])
            except (KeyError, TypeError, ValueError) as exc:
                poll.errors[key] = f"unreadable result: {exc.__class__.__name__}"
        if state != "BATCH_STATE_SUCCEEDED":
            error = operation.get("error") or {}
            poll.failed = f"gemini batch {state or 'failed'}" + (f": {error.get('message')}" if error.get("message") else "")
        return poll

    def cancel(self, remote_id: str) -> None:
        self._call(f"{self.provider.base_url}/{remote_id}:cancel", {}, what=f"cancelling gemini batch {remote_id}")

    def _call(self, url: str, body: dict | None, *, what: str) -> dict:
        from indexing.embedding_http import _error_message

        headers = {"Accept": "application/json", **self.provider._headers()}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, headers=headers, method="POST" if body is not None else "GET")
        try:
            with urllib.request.urlopen(request, timeout=self.provider.timeout) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            with exc:
                message = f"HTTP {exc.code} {what}: {_error_message(exc.read())}"
            if exc.code in (408, 409, 429) or exc.code >= 500:
                raise ProviderTransientError(message) from None
            raise ProviderPermanentError(message) from None
        except (TimeoutError, socket.timeout, urllib.error.URLError, ConnectionError, OSError, ValueError) as exc:
            raise ProviderTransientError(f"{what}: {exc.__class__.__name__}: {exc}") from None
        if not isinstance(answer, dict):
            raise ProviderTransientError(f"{what}: a JSON {type(answer).__name__} instead of an object")
        return answer


def _provider_error(exc, what: str) -> ProviderError:
    import openai

    status = getattr(exc, "status_code", None)
    message = f"{what}: {exc.__class__.__name__}: {exc}"
    if isinstance(exc, openai.APIStatusError) and status not in (408, 409, 429) and status < 500:
        return ProviderPermanentError(message)
    return ProviderTransientError(message)


def batch_api_of(provider: EmbeddingProvider | None):
    """The batch API of this provider, or None when it has none (or the threshold turns batches off)."""
    if provider is None or not settings.MEMORYHUB_EMBEDDING_BATCH_API_THRESHOLD:
        return None
    from indexing.embedding_http import GeminiProvider
    from indexing.embeddings import OpenAIProvider

    if isinstance(provider, OpenAIProvider):
        return OpenAIBatchAPI(provider)
    if isinstance(provider, GeminiProvider):
        return GeminiBatchAPI(provider)
    return None


# --- submitting -----------------------------------------------------------------------------------


def batch_wanted(*, provider, job_id: int | None, inputs: int) -> bool:
    """Whether a pass of this job that needs ``inputs`` new embeddings goes through a batch: a bulk
    job of at least the threshold (this pass's inputs, or the chunks the job's files in flight make,
    estimated: a sync of 4,000 one-chunk files is bulk work though each pass of 100 files is small),
    a provider with a batch API, and no finished batch of this job yet (its rerun after a batch embeds
    what is left synchronously)."""
    threshold = settings.MEMORYHUB_EMBEDDING_BATCH_API_THRESHOLD
    if job_id is None or not threshold or not inputs or batch_api_of(provider) is None:
        return False
    if not IndexJob.objects.filter(pk=job_id, trigger__in=BULK_TRIGGERS).exists():
        return False
    if EmbeddingBatch.objects.filter(job_id=job_id).exclude(state__in=UNFINISHED).exists():
        return False
    return inputs >= threshold or job_chunks_estimate(job_id=job_id) >= threshold


def job_chunks_estimate(*, job_id: int) -> int:
    """About how many chunks the job's files still in flight make: one per MEMORYHUB_CHUNK_TOKENS × 4
    bytes (about 4 bytes a cl100k token in prose), at least one per file."""
    from django.db.models import Sum
    from django.db.models.functions import Greatest

    from indexing.states import IN_FLIGHT

    per_chunk = settings.MEMORYHUB_CHUNK_TOKENS * 4
    estimate = MemoryFile.objects.filter(job_id=job_id, state__in=IN_FLIGHT).aggregate(
        chunks=Sum(Greatest(1, F("size") / per_chunk))
    )["chunks"]
    return int(estimate or 0)


def embedding_batch_submit(*, provider, agent_id: int, job_id: int, texts: dict[str, str], file_ids: list[int]) -> list[EmbeddingBatch]:
    """Send ``texts`` (text hash → text) to the provider's batch API; the rows of the batches, with the
    provider's ids stored, still ``submitting`` (``embedding_batches_in_flight`` sets them going).
    Raises ProviderError when the provider refused: nothing is in flight then (the rows say why), and
    the caller embeds synchronously."""
    api = batch_api_of(provider)
    identity = provider.identity
    keys = list(texts)
    size = MAX_REQUESTS[identity.provider]
    batches = []
    for start in range(0, len(keys), size):
        part = keys[start : start + size]
        row = EmbeddingBatch.objects.create(
            job_id=job_id, agent_id=agent_id, provider=identity.provider, model=identity.model_version,
            dimensions=identity.dimensions, text_hashes=part, file_ids=sorted(file_ids), inputs=len(part),
        )
        try:
            remote_id = api.submit(texts=[texts[k] for k in part], keys=part, label=f"memoryhub-batch-{row.pk}")
        except ProviderError as exc:
            now = timezone.now()
            EmbeddingBatch.objects.filter(pk=row.pk).update(state=BatchState.FAILED, error=str(exc)[:2000], finished_at=now)
            # Parts the provider took already are not waited for: this pass embeds all of it synchronously.
            EmbeddingBatch.objects.filter(pk__in=[b.pk for b in batches]).update(
                state=BatchState.FAILED, error=f"another part of the pass was refused: {exc}"[:2000], finished_at=now
            )
            raise
        EmbeddingBatch.objects.filter(pk=row.pk).update(remote_id=remote_id)
        row.remote_id = remote_id
        logger.info("embedding batch %s: %d text(s) of job %s sent to %s as %s", row.pk, len(part), job_id, identity.provider, remote_id)
        batches.append(row)
    return batches


def embedding_batches_in_flight(*, batches: list[EmbeddingBatch]) -> None:
    """submitting → in_flight: in the caller's transaction, the one that makes the files and the job
    wait, so the collector never finishes a batch whose job is not waiting for it yet."""
    EmbeddingBatch.objects.filter(pk__in=[b.pk for b in batches], state=BatchState.SUBMITTING).update(state=BatchState.IN_FLIGHT)


# --- collecting -----------------------------------------------------------------------------------


@dataclass
class CollectOutcome:
    polled: int = 0
    collected: list[int] = field(default_factory=list)  # batches finished on this run
    jobs_queued: list[int] = field(default_factory=list)


def embedding_batches_collect(*, now: datetime | None = None) -> CollectOutcome:
    """Poll every batch in flight not polled within half the poll interval, store what finished, and
    queue the jobs whose batches are all finished. Safe to run in several workers at once: a batch is
    claimed by a status-guarded UPDATE of its ``polled_at``."""
    from indexing.embeddings import get_provider

    now = now or timezone.now()
    outcome = CollectOutcome()
    _stale_submissions_fail(now=now)
    cutoff = now - timedelta(seconds=settings.MEMORYHUB_EMBEDDING_BATCH_API_POLL_INTERVAL / 2)
    due = EmbeddingBatch.objects.filter(state=BatchState.IN_FLIGHT).filter(Q(polled_at__isnull=True) | Q(polled_at__lt=cutoff))
    for batch in due.order_by("created_at"):
        claimed = EmbeddingBatch.objects.filter(pk=batch.pk, state=BatchState.IN_FLIGHT, polled_at=batch.polled_at).update(polled_at=now)
        if not claimed:
            continue  # another worker polls it
        outcome.polled += 1
        provider = get_provider()
        identity = provider.identity if provider is not None else None
        if identity is None or (identity.provider, identity.model_version, identity.dimensions) != (batch.provider, batch.model, batch.dimensions):
            # The configured model changed: these vectors would not be searched. The job reruns under
            # the new identity (maintenance re-embeds the rest).
            _batch_finish(batch=batch, poll=BatchPoll(status="abandoned", finished=True, failed="the embedding model changed since the batch was sent"), identity=None, now=now, outcome=outcome)
            continue
        try:
            _batch_poll(batch=batch, provider=provider, now=now, outcome=outcome)
        except Exception:
            # One batch's surprise (an answer of an unexpected shape) must not stop the others behind it.
            logger.exception("embedding batch %s (%s): collecting failed; next interval", batch.pk, batch.remote_id)
    return outcome


def _batch_poll(*, batch: EmbeddingBatch, provider, now: datetime, outcome: CollectOutcome) -> None:
    try:
        poll = batch_api_of(provider).poll(batch.remote_id)
    except ProviderTransientError as exc:
        if batch.created_at < now - GIVE_UP_AFTER:
            poll = BatchPoll(status="unknown", finished=True, failed=f"no answer from the provider past its 24 h window: {exc}")
        else:
            logger.info("embedding batch %s: poll failed (%s); next interval", batch.pk, exc)
            EmbeddingBatch.objects.filter(pk=batch.pk).update(remote_status="poll failed")
            return
    except ProviderPermanentError as exc:  # the batch is gone (404) or the key no longer works
        poll = BatchPoll(status="unknown", finished=True, failed=str(exc))
    if not poll.finished:
        EmbeddingBatch.objects.filter(pk=batch.pk).update(remote_status=poll.status[:64])
        return
    _batch_finish(batch=batch, poll=poll, identity=provider.identity, now=now, outcome=outcome)


def _stale_submissions_fail(*, now: datetime) -> None:
    """A row left ``submitting`` past the stuck-work cutoff: its worker died before the job waited for
    it; its files came back through their lease. A job still waiting on it (none should) is resumed."""
    cutoff = now - timedelta(seconds=settings.MEMORYHUB_INDEX_STUCK_AFTER)
    stale = list(EmbeddingBatch.objects.filter(state=BatchState.SUBMITTING, created_at__lt=cutoff))
    for batch in stale:
        error = "the worker submitting it stopped before its job waited for it"
        if EmbeddingBatch.objects.filter(pk=batch.pk, state=BatchState.SUBMITTING).update(state=BatchState.FAILED, error=error, finished_at=now):
            _job_resume(batch=batch, reason=f"embedding batch {batch.remote_id or batch.pk} failed: {error}")


def _valid(vector: Vector, dimensions: int) -> bool:
    return len(vector) == dimensions and all(math.isfinite(v) for v in vector)


def _batch_finish(*, batch: EmbeddingBatch, poll: BatchPoll, identity, now: datetime, outcome: CollectOutcome) -> None:
    wanted = set(batch.text_hashes)
    vectors = {k: v for k, v in poll.vectors.items() if k in wanted and identity is not None and _valid(v, identity.dimensions)}
    missing = len(wanted) - len(vectors)
    if poll.failed and not vectors:
        state, error = BatchState.FAILED, poll.failed
    elif missing:
        first = next((poll.errors[k] for k in batch.text_hashes if k in poll.errors), "no result")
        state = BatchState.PARTIAL
        error = f"{poll.failed + '; ' if poll.failed else ''}{missing} of {len(wanted)} without a vector (first: {first})"
    else:
        state, error = BatchState.DONE, ""
    with transaction.atomic():
        # Locked, so that an agent's deletion (agents/deletion.py) deletes the batch before these rows go
        # into the agent's cache, and finds nothing to store here, or after, and deletes them too.
        if not EmbeddingBatch.objects.select_for_update().filter(pk=batch.pk).exists():
            return  # deleted with its agent meanwhile
        if vectors:
            EmbeddingCache.objects.bulk_create(
                [cache_row(identity=identity, agent_id=batch.agent_id, digest=k, vector=v) for k, v in vectors.items()],
                ignore_conflicts=True,  # a text another job embedded meanwhile keeps its one vector
            )
        EmbeddingBatch.objects.filter(pk=batch.pk).update(
            state=state, remote_status=poll.status[:64], collected=len(vectors), error=error[:2000], finished_at=now
        )
        if batch.job_id is not None and vectors:
            IndexJob.objects.filter(pk=batch.job_id).update(chunks_embedded=F("chunks_embedded") + len(vectors))
    if error:
        logger.warning("embedding batch %s (%s) %s: %s; the rest is embedded synchronously", batch.pk, batch.remote_id, state, error)
    else:
        logger.info("embedding batch %s (%s): %d vector(s) collected", batch.pk, batch.remote_id, len(vectors))
    outcome.collected.append(batch.pk)
    job = _job_resume(batch=batch, reason=error and f"embedding batch {batch.remote_id or batch.pk} {state}: {error}")
    if job is not None:
        outcome.jobs_queued.append(job)


def _job_resume(*, batch: EmbeddingBatch, reason: str) -> int | None:
    """Once none of its batches is unfinished, queue the job again: its rerun takes the vectors from
    the cache and embeds whatever is missing synchronously. Its files that moved on (a new upload, a
    re-index) belong to their new jobs. Returns the job queued, if any."""
    from indexing.maintenance import files_requeue_under_new_job
    from indexing.recovery import job_enqueue_on_commit
    from indexing.states import job_to_queued

    if batch.job_id is None:
        waiting = list(MemoryFile.objects.filter(pk__in=batch.file_ids, state=MemoryFile.State.PENDING, job__isnull=True).values_list("id", flat=True))
        return files_requeue_under_new_job(agent_id=batch.agent_id, file_ids=waiting).id if waiting else None
    if EmbeddingBatch.objects.filter(job_id=batch.job_id, state__in=UNFINISHED).exists():
        return None
    with transaction.atomic():
        if IndexJob.objects.filter(pk=batch.job_id, state=JobState.WAITING).update(**job_to_queued(error=reason)):
            trigger = IndexJob.objects.values_list("trigger", flat=True).get(pk=batch.job_id)
            job_enqueue_on_commit(job_id=batch.job_id, trigger=trigger)
            return batch.job_id
    return None


# --- cancelling -----------------------------------------------------------------------------------


def embedding_batch_cancel(*, batch: EmbeddingBatch, why: str) -> bool:
    """Ask the provider to cancel a batch nobody will collect (its agent is being deleted), so that it is
    not run and paid in full; then mark it failed with ``why``, so it is not asked twice. Best effort: a
    provider that refuses or does not answer (within its request timeout) is logged, and the batch ends
    in the provider's own completion window. True when the provider accepted the cancellation."""
    from indexing.embeddings import get_provider

    provider = get_provider()
    api = batch_api_of(provider)
    accepted = False
    if not batch.remote_id:
        pass  # never reached the provider (a submission that died): nothing to cancel
    elif api is None or provider.identity.provider != batch.provider:
        why += f" (not cancelled at {batch.provider}: it is no longer the configured provider)"
    else:
        try:
            api.cancel(batch.remote_id)
            accepted = True
        except Exception as exc:  # a ProviderError, or an answer of a shape the SDK did not expect
            logger.warning("embedding batch %s (%s): the provider did not cancel it: %s", batch.pk, batch.remote_id, exc)
            why += f" (the provider did not cancel it: {exc.__class__.__name__}: {exc})"
    EmbeddingBatch.objects.filter(pk=batch.pk, state__in=UNFINISHED).update(
        state=BatchState.FAILED, error=why[:2000], remote_status="cancelled" if accepted else batch.remote_status,
        finished_at=timezone.now(),
    )
    return accepted


# --- what status and the admin show ---------------------------------------------------------------


def batches_in_flight(*, agent_id: int | None = None):
    rows = EmbeddingBatch.objects.filter(state__in=UNFINISHED)
    if agent_id is not None:
        rows = rows.filter(agent_id=agent_id)
    return rows.order_by("created_at")
