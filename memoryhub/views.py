"""Unauthenticated liveness/readiness: is the database reachable, is the broker reachable.

It names no versions, hosts or secrets: it is meant to be open to load balancers.
"""

from django.conf import settings
from django.db import connection
from django.http import JsonResponse


def _database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
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
