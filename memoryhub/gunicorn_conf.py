"""Gunicorn's configuration for `make run` and the container: a bounded server.

Each worker process runs MEMORYHUB_WEB_THREADS threads and keeps a pool of as many database
connections (MEMORYHUB_DB_POOL_SIZE, set here for the workers unless given: one per thread and per search
helper), so connections are bounded by workers x (threads + helpers) whatever the load: 2 x (8 + 2) = 20
by default, next to PostgreSQL's usual 100. Requests
beyond the threads wait in gunicorn's queue instead of opening connections (runserver opened one per
request thread and kept it, until Postgres refused new clients for good).

    gunicorn -c python:memoryhub.gunicorn_conf --bind 127.0.0.1:8000 memoryhub.wsgi:application
"""

import os

from memoryhub.env import env_int
from memoryhub.gunicorn_worker import HOLD_ENVIRON_KEY, HOLD_REQUEST_ATTRIBUTE, SENDER_ENVIRON_KEY, SENDER_REQUEST_ATTRIBUTE

workers = int(os.environ.get("MEMORYHUB_WEB_WORKERS", "2"))
threads = int(os.environ.get("MEMORYHUB_WEB_THREADS", "8"))
worker_class = "memoryhub.gunicorn_worker.HoldingThreadWorker"  # gthread, holding flooding connections
# A request may take this long before its worker is restarted (a search has its own 6 s deadline).
timeout = 60
graceful_timeout = 10
keepalive = 5
# Each worker tells the master it is alive by touching a file, on every turn of its event loop (several
# times per request). On a disk-backed /tmp that is a filesystem metadata write each time; in memory it
# is not (gunicorn's own advice for containers).
worker_tmp_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None
# Recycle workers now and then, so slow growth in one process never becomes an outage. Refused requests
# (429) do not count (post_request below).
max_requests = 5000
max_requests_jitter = 500
# In JSON mode each request is logged once by memoryhub.observability (route, not the raw path, which
# gunicorn's access log would print); plain-text development logs keep gunicorn's line too.
accesslog = "-" if os.environ.get("MEMORYHUB_LOG_FORMAT", "json") == "text" else None
# That line with an MCP URL's token written /mcp/<token> (memoryhub/gunicorn_logging.py).
logger_class = "memoryhub.gunicorn_logging.AccessLogger"

# The workers import Django after this file ran: one pooled connection per thread, and one for each of
# the search helpers that run a hybrid search's keyword half beside its vector half (search/beside.py).
# A pool size given smaller than that leaves the helpers what the threads do not need (none: the halves
# then run one after the other), so that a helper never waits for a connection its caller holds.
# An empty value (the container's .env from .env.example) is unset; 0 = no pool (a connection per thread
# and per helper, kept), which needs no such cap. Read as settings.py reads them (the same defaults and bounds).
_search_helpers = env_int("MEMORYHUB_SEARCH_PARALLEL_HALVES", 2, minimum=0, maximum=64)
_pool_size = env_int("MEMORYHUB_DB_POOL_SIZE", threads + _search_helpers, minimum=0, maximum=100)
if _pool_size:
    _search_helpers = max(0, min(_search_helpers, _pool_size - threads))
os.environ["MEMORYHUB_DB_POOL_SIZE"] = str(_pool_size)
os.environ["MEMORYHUB_SEARCH_PARALLEL_HALVES"] = str(_search_helpers)


def when_ready(server):
    """The local embedding model loads in the master, before the workers fork: they share its pages
    and the first search after a start is as fast as the next (MEMORYHUB_EMBEDDING_WARM_UP)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")
    import django

    django.setup()
    from indexing.embeddings import provider_warm_up

    took = provider_warm_up()
    if took is not None:
        server.log.info("local embedding model loaded in %.1f s, before the workers fork", took)


def post_worker_init(worker):
    """Each worker runs the shared model once before it takes requests: torch starts its thread pool
    here rather than inside the first search."""
    from indexing.embeddings import provider_warm_up_child

    provider_warm_up_child()


def post_request(worker, req, environ, resp):
    """A request refused with 429 is not counted towards max_requests. It did almost no work (the cheap
    refusal is the first middleware), and a flood that ignores its waits sends hundreds a second: counted,
    they recycled every worker each few seconds, and each restart is paid by every tenant's requests on it.
    gunicorn counted the request before the app ran; this hook runs after the response. A refusal the
    middleware marked for holding (the client ignored its told wait) is passed on to HoldingThreadWorker,
    and so is every request's sender (the worker holds no connection that several senders share)."""
    if req is not None:
        setattr(req, SENDER_REQUEST_ATTRIBUTE, environ.get(SENDER_ENVIRON_KEY, ""))
    if resp is not None and resp.status_code == 429:
        worker.nr -= 1
        hold = environ.get(HOLD_ENVIRON_KEY)
        if hold and req is not None:
            setattr(req, HOLD_REQUEST_ATTRIBUTE, hold)  # read by HoldingThreadWorker once the 429 is sent


def child_exit(server, worker):
    """Prometheus multiprocess mode (docs/operations.md): drop a dead worker's live gauges."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
