"""Prometheus metrics: what the service does, in series an operator can alert on.

Counters and histograms live here and are updated in place by the code that does the work; gauges that
describe the database or the queue are read at scrape time (``ScrapeCollector``, bounded queries). No
label carries an agent slug, a path or anything else a caller chooses: every label has a small fixed set
of values, so the number of series stays bounded however many agents there are.

Under gunicorn or Celery (several processes) set ``PROMETHEUS_MULTIPROC_DIR`` to an empty directory
shared by the processes of one host: each process writes its values there and /metrics adds them up
(docs/operations.md).
"""

import hmac
import ipaddress
import os

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

REQUEST_SECONDS = Histogram(
    "memoryhub_http_request_duration_seconds",
    "Time to answer an HTTP request, by URL route name (not path), method and status code.",
    ["route", "method", "status"],
)
SEARCH_SECONDS = Histogram(
    "memoryhub_search_duration_seconds",
    "Time memory_search took, by the mode it ran in and how many results it returned (bucketed).",
    ["mode", "results"],
)
TASK_SECONDS = Histogram(
    "memoryhub_task_duration_seconds",
    "Time a Celery task ran (indexing jobs and batches, maintenance), by task name and final state.",
    ["task", "state"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, float("inf")),
)
EMBEDDING_REQUESTS = Counter(
    "memoryhub_embedding_requests", "Calls to the embedding provider, by kind (document or query).", ["kind"]
)
EMBEDDING_INPUTS = Counter("memoryhub_embedding_inputs", "Texts sent to the embedding provider, by kind.", ["kind"])
EMBEDDING_ERRORS = Counter("memoryhub_embedding_errors", "Embedding provider calls that raised, by kind.", ["kind"])
EMBEDDING_CACHE_HITS = Counter(
    "memoryhub_embedding_cache_hits", "Texts answered from an embedding cache instead of the provider, by kind.", ["kind"]
)
THROTTLED = Counter("memoryhub_throttled_requests", "Requests refused by a rate limit, by limit scope.", ["scope"])

# Result counts are bucketed so the label keeps five values whatever max_results allows.
_RESULT_BUCKETS = ((0, "0"), (1, "1"), (5, "2-5"), (20, "6-20"))
# The most rows one scrape counts per state: a scrape stays cheap however large the backlog grows.
SCRAPE_COUNT_LIMIT = 100_000


def results_bucket(count: int) -> str:
    for upper, label in _RESULT_BUCKETS:
        if count <= upper:
            return label
    return "21+"


def request_observe(*, route: str, method: str, status: int, seconds: float) -> None:
    REQUEST_SECONDS.labels(route=route, method=method, status=str(status)).observe(seconds)


def search_observe(*, mode: str, results: int, seconds: float) -> None:
    SEARCH_SECONDS.labels(mode=mode, results=results_bucket(results)).observe(seconds)


def task_observe(*, task: str, state: str, seconds: float) -> None:
    TASK_SECONDS.labels(task=task, state=state or "UNKNOWN").observe(seconds)


def embedding_observe(*, kind: str, inputs: int, error: bool = False) -> None:
    EMBEDDING_REQUESTS.labels(kind=kind).inc()
    EMBEDDING_INPUTS.labels(kind=kind).inc(inputs)
    if error:
        EMBEDDING_ERRORS.labels(kind=kind).inc()


def embedding_cache_hits(*, kind: str, hits: int) -> None:
    if hits:
        EMBEDDING_CACHE_HITS.labels(kind=kind).inc(hits)


def throttled_increment(*, scope: str) -> None:
    """Count one request refused by a rate limit. `scope` names the limit (e.g. "search", "write"),
    never the caller."""
    THROTTLED.labels(scope=scope).inc()


class ScrapeCollector:
    """Gauges read when /metrics is scraped: the index queue's depth and files waiting or failed."""

    def collect(self):
        from django.db import connection

        from indexing.models import MemoryFile
        from memoryhub import observability

        files = GaugeMetricFamily(
            "memoryhub_files", f"Memory files by indexing state (counted up to {SCRAPE_COUNT_LIMIT}).", labels=["state"]
        )
        table = MemoryFile._meta.db_table
        with connection.cursor() as cursor:
            for state in (MemoryFile.State.PENDING, MemoryFile.State.INDEXING, MemoryFile.State.FAILED):
                cursor.execute(
                    f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE state = %s LIMIT %s) AS capped",
                    [state.value, SCRAPE_COUNT_LIMIT],
                )
                files.add_metric([state.value], cursor.fetchone()[0])
        yield files

        queues = {
            observability.index_queue_name(): ("memoryhub_index_queue_depth", "Messages waiting in the indexing queue."),
            observability.background_queue_name(): (
                "memoryhub_index_background_queue_depth",
                "Messages waiting in the background queue (re-indexing, the sweeps' jobs).",
            ),
        }
        try:
            depths = observability.queue_depths(queues=list(queues))
        except Exception:
            depths = {}  # the broker is unreachable (one attempt for both); /readyz says so too
        for queue, (name, help_text) in queues.items():
            depth = GaugeMetricFamily(name, help_text)
            depth.add_metric([], depths.get(queue, float("nan")))
            yield depth


class _ThisProcess:
    """This process's own metrics (single-process mode) inside a per-scrape registry."""

    def collect(self):
        yield from REGISTRY.collect()


def exposition() -> bytes:
    """The text a scrape receives."""
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)
    else:
        registry.register(_ThisProcess())
    registry.register(ScrapeCollector())
    return generate_latest(registry)


def scrape_allowed(*, authorization: str, remote_addr: str, token: str, allowed_ips: list[str]) -> bool:
    if token:
        scheme, _, raw = authorization.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(raw.strip().encode(), token.encode()):
            return True
    if allowed_ips and remote_addr:
        try:
            address = ipaddress.ip_address(remote_addr)
        except ValueError:
            return False
        return any(address in ipaddress.ip_network(network, strict=False) for network in allowed_ips)
    return False
