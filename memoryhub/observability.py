"""What operators see of a running service: readiness of the workers, and one JSON log line per request.

Every log record carries the id of the request it belongs to (``X-Request-ID`` when the caller sent a sane
one, else a fresh one), and the id travels with the Celery tasks that request queued, so a worker's lines
can be matched to the upload that caused them. Request lines name the route, never the raw path, and
nothing in them carries a token, file content or query text.
"""

import contextlib
import contextvars
import json
import logging
import re
import time
import uuid
from datetime import datetime, timezone

from celery import signals
from django.urls import Resolver404, resolve

logger = logging.getLogger("memoryhub.requests")
task_logger = logging.getLogger("memoryhub.tasks")

REQUEST_ID_HEADER = "X-Request-ID"
# Task header carrying the request id to the worker (Celery passes unknown headers through).
TASK_HEADER = "memoryhub_request_id"
# Ids chosen by callers are logged and echoed: keep them short and free of anything a log parser trips on.
_SANE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("memoryhub_request_id", default=None)


def request_id_from(header: str | None) -> str:
    if header and _SANE_REQUEST_ID.match(header):
        return header
    return uuid.uuid4().hex


# --- Readiness -----------------------------------------------------------------------------------
def index_queue_name() -> str:
    from indexing.tasks import index_job_task
    from memoryhub.celery import app

    return getattr(index_job_task, "queue", None) or app.conf.task_default_queue


# The background queue is the main one's name with this suffix (settings.CELERY_TASK_QUEUES).
BACKGROUND_QUEUE_SUFFIX = ".background"


def background_queue_name() -> str:
    """Re-indexing and the sweeps' jobs (settings.CELERY_TASK_QUEUES, indexing/recovery.py job_queue)."""
    return f"{index_queue_name()}{BACKGROUND_QUEUE_SUFFIX}"


@contextlib.contextmanager
def _broker(*, timeout: float):
    """A broker connection made with one quick attempt: a probe or a scrape must answer fast when the
    broker is down, not retry for seconds as a worker would."""
    from memoryhub.celery import app

    with app.connection_for_read() as connection:
        connection.ensure_connection(max_retries=1, interval_start=0, timeout=timeout)
        yield app, connection


def workers_consuming(*, queues: list[str], timeout: float) -> dict[str, int]:
    """How many workers answer within `timeout` seconds and consume each of `queues` (workers of other
    queues on the same broker do not make this deployment ready)."""
    with _broker(timeout=timeout) as (app, connection):
        replies = app.control.inspect(timeout=timeout, connection=connection).active_queues() or {}
    consumed = [{q.get("name") for q in worker_queues or []} for worker_queues in replies.values()]
    return {queue: sum(1 for names in consumed if queue in names) for queue in queues}


def queue_depths(*, queues: list[str], timeout: float = 1.0) -> dict[str, int]:
    """Messages waiting in each of `queues` (all priority levels), over one broker connection; a passive
    declare, so it creates nothing."""
    depths = {}
    with _broker(timeout=timeout) as (app, connection):
        for queue in queues:
            try:
                depths[queue] = connection.default_channel.queue_declare(queue=queue, passive=True).message_count
            except Exception:
                depths[queue] = 0  # the queue does not exist yet: nothing was ever queued on it
    return depths


# --- Structured logs -----------------------------------------------------------------------------
# Attributes every LogRecord has; anything else on a record was passed with `extra=` and is logged.
# Django's own `request` extra (its repr names the raw path) is left out too.
_RECORD_ATTRIBUTES = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName", "request"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the request id, and the record's extras."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = request_id_var.get()
        if request_id:
            entry["request_id"] = request_id
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRIBUTES and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """The plain-text development format, with the request id when there is one."""

    def __init__(self):
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = " ".join(f"{k}={v}" for k, v in vars(record).items() if k not in _RECORD_ATTRIBUTES and not k.startswith("_"))
        request_id = request_id_var.get()
        return " ".join(part for part in (line, extras, f"request_id={request_id}" if request_id else "") if part)


def _route(request) -> str:
    match = getattr(request, "resolver_match", None)
    if match is None:  # answered before URL resolution (a middleware's 429 or 503), or an unknown URL
        try:
            match = resolve(request.path_info)
        except Resolver404:
            return "unmatched"
    return match.view_name or "unnamed"


class RequestLogMiddleware:
    """Give each request an id (echoed in the response), and log it once when it is answered."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request_id = request_id_from(request.headers.get(REQUEST_ID_HEADER))
        request.request_id = request_id
        reset = request_id_var.set(request_id)
        started = time.perf_counter()
        try:
            response = self.get_response(request)
            duration = time.perf_counter() - started
            response[REQUEST_ID_HEADER] = request_id
            route = _route(request)
            # DRF copies the authenticated token onto the Django request: request.auth is the AgentToken.
            agent_id = getattr(getattr(request, "auth", None), "agent_id", None)
            logger.info(
                "request",
                extra={
                    "method": request.method,
                    "route": route,
                    "status": response.status_code,
                    "duration_ms": round(duration * 1000, 2),
                    "agent_id": agent_id,
                },
            )
            from memoryhub import metrics

            metrics.request_observe(route=route, method=request.method, status=response.status_code, seconds=duration)
            return response
        finally:
            request_id_var.reset(reset)


# --- Celery: the request id travels with the task ------------------------------------------------
@signals.before_task_publish.connect
def _publish_request_id(headers=None, **kwargs):
    request_id = request_id_var.get()
    if request_id and headers is not None:
        headers[TASK_HEADER] = request_id


_task_started: dict[str, tuple[float, contextvars.Token]] = {}


@signals.task_prerun.connect
def _task_prerun(task_id=None, task=None, **kwargs):
    request_id = getattr(task.request, TASK_HEADER, None)
    if task.request.is_eager:
        request_id = request_id or request_id_var.get()  # eager tasks run inside the request
    _task_started[task_id] = (time.perf_counter(), request_id_var.set(request_id))


@signals.task_postrun.connect
def _task_postrun(task_id=None, task=None, state=None, **kwargs):
    started = _task_started.pop(task_id, None)
    if started is None:
        return
    began, token = started
    seconds = time.perf_counter() - began
    task_logger.info("task", extra={"task": task.name, "state": state, "duration_ms": round(seconds * 1000, 2)})
    from memoryhub import metrics

    metrics.task_observe(task=task.name, state=state, seconds=seconds)
    request_id_var.reset(token)


class RouteNotPath(logging.Filter):
    """Django logs a 5xx as "<reason>: <raw path>"; the raw path can name a memory file, so it becomes the route."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        if record.name == "django.request" and request is not None and len(record.args or ()) == 2:
            record.args = (record.args[0], _route(request))
        return True


def logging_config(*, log_format: str, level: str) -> dict:
    """The LOGGING setting: every record to stderr in `log_format` (json or text)."""
    formatter = JsonFormatter if log_format == "json" else TextFormatter
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"memoryhub": {"()": formatter}},
        "filters": {"route_not_path": {"()": RouteNotPath}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "memoryhub", "filters": ["route_not_path"]}},
        "root": {"handlers": ["console"], "level": level},
        # Every request already has its line (route, status); Django's 4xx warnings would add the raw path.
        "loggers": {"django.request": {"level": "ERROR"}},
    }
