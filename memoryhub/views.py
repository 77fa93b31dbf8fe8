"""Unauthenticated liveness (/healthz: database and broker reachable) and readiness (/readyz: a worker too).

It names no versions, hosts or secrets: it is meant to be open to load balancers.
"""

from django.conf import settings
from django.db import connection
from django.http import Http404, HttpResponse, JsonResponse

from memoryhub.postgresql.reachable import database_reachable
from memoryhub.postgresql.wait_limit import wait_limit

# How long /healthz waits for the database's answer: a database that hangs is unhealthy, and a load
# balancer's probe gives up after a few seconds.
HEALTH_DATABASE_SECONDS = 2.0


def _database_ok() -> bool:
    # A new connection of the process's own first, at most one every 5 s (memoryhub/postgresql/reachable.py): it
    # tells a stopped or hung database within 2 s, where a pooled process's first wait for its pool takes the
    # pool's timeout (10 s), and the process's requests after it are answered at once.
    if not database_reachable():
        return False
    try:
        with wait_limit(HEALTH_DATABASE_SECONDS, why="/healthz"), connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except Exception:
        return False


def _broker_state() -> str:
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return "in-process"  # no broker configured: tasks run inside the web process
    import redis

    try:
        redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_connect_timeout=1, socket_timeout=1).ping()
        return "ok"
    except Exception:
        return "unreachable"


def healthz(request):
    database = "ok" if _database_ok() else "unreachable"
    broker = _broker_state()
    healthy = database == "ok" and broker != "unreachable"
    return JsonResponse(
        {"status": "ok" if healthy else "unavailable", "database": database, "broker": broker},
        status=200 if healthy else 503,
    )


def readyz(request):
    """Readiness: the database answers, workers consume both index queues (uploads, and re-indexing in
    the background queue), and how deep each queue is.

    Slower than /healthz (it waits MEMORYHUB_READYZ_TIMEOUT for workers to answer a broadcast), so
    probe it less often; a deployment without a live worker is not ready: uploads would never be indexed.
    """
    from memoryhub import observability

    database = "ok" if _database_ok() else "unreachable"
    if settings.CELERY_TASK_ALWAYS_EAGER:
        body = {"database": database, "worker": "in-process", "workers": 0, "queue_depth": 0, "background_queue_depth": 0}
        ready = database == "ok"
    else:
        queue, background = observability.index_queue_name(), observability.background_queue_name()
        try:
            consuming = observability.workers_consuming(queues=[queue, background], timeout=settings.MEMORYHUB_READYZ_TIMEOUT)
            depths = observability.queue_depths(queues=[queue, background])
            workers, depth, background_depth = consuming[queue], depths[queue], depths[background]
            worker = "none" if not workers else "ok" if consuming[background] else "no background worker"
        except Exception:
            workers, depth, background_depth, worker = 0, None, None, "broker unreachable"
        body = {"database": database, "worker": worker, "workers": workers, "queue_depth": depth, "background_queue_depth": background_depth}
        ready = database == "ok" and worker == "ok"
    return JsonResponse({"status": "ok" if ready else "unavailable", **body}, status=200 if ready else 503)


def metrics(request):
    """Prometheus scrape endpoint. Closed unless MEMORYHUB_METRICS_TOKEN or MEMORYHUB_METRICS_ALLOWED_IPS
    lets the caller in; anyone else gets the same 404 as an unknown URL, so it does not advertise itself."""
    from memoryhub import metrics as service_metrics

    allowed = service_metrics.scrape_allowed(
        authorization=request.headers.get("Authorization", ""),
        remote_addr=request.META.get("REMOTE_ADDR", ""),
        token=settings.MEMORYHUB_METRICS_TOKEN,
        allowed_ips=settings.MEMORYHUB_METRICS_ALLOWED_IPS,
    )
    if not allowed:
        raise Http404
    from prometheus_client import CONTENT_TYPE_LATEST

    return HttpResponse(service_metrics.exposition(), content_type=CONTENT_TYPE_LATEST)
