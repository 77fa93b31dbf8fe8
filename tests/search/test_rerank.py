"""Issue 18: the optional rerank stage, against a local /rerank server in the Cohere/Jina, Voyage and
TEI shapes. Off by default; on failure the search answers in the unreranked order and says so."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from search.services import memory_search

FILES = {
    "memory/deploy.md": "# Deploy\n\nThe billing service deploys on Tuesday after the standup.\n",
    "memory/billing.md": "# Billing\n\nBilling invoices are sent on the first day of the month.\n",
    "memory/garden.md": "# Garden\n\nThe tomatoes need water every morning; billing never comes up here.\n",
}
QUERY = "billing"
WORD_OF = {"memory/deploy.md": "Tuesday", "memory/billing.md": "invoices", "memory/garden.md": "tomatoes"}


class RerankServer:
    """POST /rerank in one of three shapes; the score of a document is 0.9 when it contains ``favourite``,
    else 0.1. ``behaviour``: ok | 500 | hang | malformed | partial."""

    def __init__(self, shape: str, favourite: str = "tomatoes") -> None:
        self.shape, self.favourite, self.behaviour = shape, favourite, "ok"
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"body": body, "auth": self.headers.get("Authorization")})
                if server.behaviour == "hang":
                    time.sleep(4)
                if server.behaviour == "500":
                    return self._send(500, {"message": "internal error"})
                if server.behaviour == "malformed":
                    return self._send(200, {"unexpected": True})
                documents = body["texts"] if server.shape == "tei" else body["documents"]
                scored = [{"index": i, "relevance_score": 0.9 if server.favourite in d else 0.1} for i, d in enumerate(documents)]
                if server.behaviour == "partial":
                    scored = scored[:1]
                scored.sort(key=lambda item: -item["relevance_score"])
                if server.shape == "tei":
                    self._send(200, [{"index": s["index"], "score": s["relevance_score"]} for s in scored])
                elif server.shape == "voyage":
                    self._send(200, {"object": "list", "data": scored, "model": body["model"]})
                else:
                    self._send(200, {"id": "r", "results": scored, "meta": {}})

            def _send(self, status, payload):
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                try:
                    self.wfile.write(raw)
                except BrokenPipeError:
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/rerank"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def indexed(alice, index_files):
    index_files(alice, FILES)
    return alice


def use(settings, server, *, model="rerank-test", key="rk-test"):
    settings.MEMORYHUB_RERANK_URL = server.url
    settings.MEMORYHUB_RERANK_MODEL = "" if server.shape == "tei" else model
    settings.MEMORYHUB_RERANK_API_KEY = key
    settings.MEMORYHUB_RERANK_TIMEOUT = 0.5


@pytest.fixture(params=["cohere", "voyage", "tei"])
def reranker(request, settings):
    server = RerankServer(request.param)
    use(settings, server)
    yield server
    server.stop()


def paths(response):
    return [r.path for r in response.results]


def test_it_is_off_by_default(indexed, settings):
    assert settings.MEMORYHUB_RERANK_URL == ""
    response = memory_search(agent=indexed.agent, query=QUERY, explain=True)
    assert len(response.results) == 3
    assert all("rerank_rank" not in r.explain for r in response.results)


def favour_the_last(indexed, server) -> tuple[list[str], str]:
    """The unreranked order, and the path the reranker is told to like best: fusion's last."""
    server.behaviour = "500"  # while it fails, the search keeps the fusion's order
    unreranked = paths(memory_search(agent=indexed.agent, query=QUERY))
    server.behaviour = "ok"
    assert len(unreranked) == 3
    server.favourite = WORD_OF[unreranked[-1]]
    return unreranked, unreranked[-1]


def test_the_reranker_orders_the_top_candidates(indexed, reranker):
    unreranked, favourite = favour_the_last(indexed, reranker)
    response = memory_search(agent=indexed.agent, query=QUERY, explain=True)
    assert paths(response)[0] == favourite and sorted(paths(response)) == sorted(unreranked)
    assert response.results[0].explain["rerank_rank"] == 1 and response.results[0].explain["rerank_score"] == 0.9
    assert "Rerank" not in response.message
    # The score stays the fusion's (its scale and min_score keep their meaning); the order is the reranker's.
    assert response.results[0].score < max(r.score for r in response.results)
    [request] = reranker.requests[-1:]
    assert request["body"]["query"] == QUERY and request["auth"] == "Bearer rk-test"
    documents = request["body"]["texts" if reranker.shape == "tei" else "documents"]
    assert len(documents) == 3 and any(reranker.favourite in d for d in documents)
    if reranker.shape != "tei":
        assert request["body"]["model"] == "rerank-test" and request["body"]["top_n"] == 3


@pytest.mark.parametrize("behaviour, said", [
    ("500", "HTTP 500"), ("hang", "did not answer within 0.5 s"), ("malformed", "malformed answer"),
    ("partial", "scored 1 of 3"),
])
def test_a_failing_reranker_leaves_the_unreranked_order_and_says_so(indexed, settings, behaviour, said):
    server = RerankServer("cohere")
    try:
        unreranked, favourite = favour_the_last(indexed, server)  # before the reranker is on
        use(settings, server)
        server.behaviour = behaviour
        started = time.monotonic()
        response = memory_search(agent=indexed.agent, query=QUERY, explain=True)
        assert time.monotonic() - started < 3  # its own 0.5 s timeout (with room for a loaded machine), not the 4 s hang
        assert paths(response) == unreranked and paths(response)[0] != favourite
        assert "Reranking failed" in response.message and said in response.message
        assert "unreranked order" in response.message
        assert all("rerank_rank" not in r.explain for r in response.results)
    finally:
        server.stop()


def test_an_unreachable_reranker_is_a_note_not_an_error(indexed, settings):
    settings.MEMORYHUB_RERANK_URL = "http://127.0.0.1:9/rerank"
    settings.MEMORYHUB_RERANK_MODEL = "m"
    response = memory_search(agent=indexed.agent, query=QUERY)
    assert response.results and "cannot reach the rerank endpoint" in response.message


def test_explain_through_the_api_shows_the_rerank(indexed, reranker, search):
    _, favourite = favour_the_last(indexed, reranker)
    status, body = search(indexed, QUERY, explain=True)
    assert status == 200
    assert body["results"][0]["path"] == favourite
    assert body["results"][0]["explain"]["rerank_rank"] == 1
