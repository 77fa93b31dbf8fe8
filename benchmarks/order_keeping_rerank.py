"""A /rerank server that keeps the order it is given (relevance 1 - i/n), for measuring what the rerank
stage itself costs a search (docs/providers.md, "Optional reranking"):

    .venv/bin/python benchmarks/order_keeping_rerank.py 18777 &
    MEMORYHUB_RERANK_URL=http://127.0.0.1:18777/rerank MEMORYHUB_RERANK_MODEL=fake ... bench_search --only locomo

It answers the Cohere/Jina shape ({"results": [{"index", "relevance_score"}]}) to `documents` or TEI's
`texts`. Rankings are unchanged by design: only the latency differs from a run without it.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class OrderKeepingRerank(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        documents = body.get("documents") or body.get("texts") or []
        results = [{"index": i, "relevance_score": 1 - i / len(documents)} for i in range(len(documents))]
        raw = json.dumps({"results": results}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 18777), OrderKeepingRerank).serve_forever()
