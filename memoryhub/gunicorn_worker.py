"""gunicorn's threaded worker, which stops reading a connection whose client ignores the waits it is told.

A client that keeps sending during the wait its 429 told it (Retry-After) is refused at the top of the
middleware stack (agents/throttles.py RateLimitedTokensMiddleware), without a query; yet each refusal
still costs the web process its HTTP parsing, a thread hand-off and Django's request handling, about a
millisecond of CPU. A loop that ignores its waits sends hundreds a second, and those milliseconds are
taken, under the interpreter lock, from the other tenants' requests in the same processes: their p95
rose by 30-45 % under a 200-requests-a-second flood that was almost entirely refused (docs/reliability.md,
"Holding a flood's connections").

So the middleware marks such a refusal (``HOLD_ENVIRON_KEY`` in the WSGI environ, with the seconds left of
the told wait, capped by MEMORYHUB_RATE_LIMIT_HOLD_SECONDS), the ``post_request`` hook copies the mark to
the request, and this worker, once the 429 is sent, leaves the connection out of its poller until then:
the client's next request waits in the kernel's socket buffer, costing no thread and no CPU, and is read
when the wait is over. A flood of N connections is served at most N requests per wait instead of as many
as it sends. A client that waits as told never sends early and is never held. At most
``HELD_SHARE`` of the worker's connections are held at once; past that a refused connection is closed
instead (a flood of many connections must not take the slots other clients connect through).

Only a connection that has carried one token's requests and nobody else's is held. A host that sends
several agents' requests over one keep-alive connection, or a proxy that pools its connections to this
server, would otherwise have another tenant's next request wait unread behind the one that ignored its
wait; such a shared connection is answered 429 as any other, request by request.
"""

import heapq
import itertools
import time

from gunicorn.workers.gthread import ThreadWorker

# The environ key the middleware sets, and the attribute post_request copies it to on gunicorn's request.
HOLD_ENVIRON_KEY = "memoryhub.hold_seconds"
HOLD_REQUEST_ATTRIBUTE = "memoryhub_hold_seconds"
# Who sent the request (a digest of its bearer token; absent for a request without one), copied the same way.
SENDER_ENVIRON_KEY = "memoryhub.sender"
SENDER_REQUEST_ATTRIBUTE = "memoryhub_sender"
HELD_SHARE = 0.25  # of worker_connections


class HoldingThreadWorker(ThreadWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._held: list[tuple[float, int, object, object]] = []  # heap of (release at, order, conn, future)
        self._order = itertools.count()

    def handle_request(self, req, conn):
        keepalive = super().handle_request(req, conn)  # runs post_request, which marks `req`
        sender = getattr(req, SENDER_REQUEST_ATTRIBUTE, "")
        if not hasattr(conn, "memoryhub_sender"):
            conn.memoryhub_sender = sender  # the first request's sender
        elif conn.memoryhub_sender != sender:
            conn.memoryhub_sender = None  # shared by several senders: never held from now on
        hold = getattr(req, HOLD_REQUEST_ATTRIBUTE, 0) if conn.memoryhub_sender is not None else 0
        conn.memoryhub_hold_until = time.monotonic() + hold if hold else 0.0
        return keepalive

    def finish_request(self, conn, fs):
        """On the main thread, after the response: hold the connection instead of polling it again."""
        until = getattr(conn, "memoryhub_hold_until", 0.0)
        if not until or not self.alive or fs.cancelled() or fs.exception() is not None or fs.result() is not True:
            return super().finish_request(conn, fs)
        conn.memoryhub_hold_until = 0.0
        if len(self._held) >= max(1, int(self.worker_connections * HELD_SHARE)):
            self.nr_conns -= 1
            conn.close()
            return None
        heapq.heappush(self._held, (until, next(self._order), conn, fs))
        return None

    def wait_for_and_dispatch_events(self, timeout):
        self._release_held()
        if self._held:
            timeout = min(timeout, max(0.0, self._held[0][0] - time.monotonic()))
        return super().wait_for_and_dispatch_events(timeout)

    def _release_held(self) -> None:
        """Connections whose hold is over (all of them once the worker stops) go back to gunicorn's own
        handling: polled for the next request, or answered at once when it was read ahead already."""
        now = time.monotonic()
        while self._held and (self._held[0][0] <= now or not self.alive):
            _, _, conn, fs = heapq.heappop(self._held)
            super().finish_request(conn, fs)
