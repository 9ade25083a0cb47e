"""kvtier.core.web, the one helper for small HTTP calls, against a real local HTTP server."""

import json
import threading
import urllib.error
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kvtier.core import web
from kvtier.stack.process import free_port


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        answers = {"/json": (200, b'{"data": [1]}'), "/text": (200, "µ metrics".encode()), "/bad": (200, b"not json")}
        self._send(*answers.get(self.path, (404, b"no such page")))

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"] or 0))
        self._send(200, json.dumps({"got": json.loads(body) if body else None,
                                    "type": self.headers.get("Content-Type")}).encode())


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_json_and_text_round_trips(server):
    assert web.get_json(f"{server}/json") == {"data": [1]}
    assert web.get_text(f"{server}/text") == "µ metrics"
    assert web.post_json(f"{server}/tokenize", {"prompt": "hi"}) == {"got": {"prompt": "hi"},
                                                                     "type": "application/json"}
    assert json.loads(web.request(f"{server}/reset", method="POST")) == {"got": None, "type": None}


def test_failures_are_urllibs_and_readiness_never_raises(server):
    with pytest.raises(urllib.error.HTTPError):
        web.get_json(f"{server}/missing")
    with pytest.raises(ValueError):
        web.get_json(f"{server}/bad")
    closed = f"http://127.0.0.1:{free_port()}/json"
    with pytest.raises(web.ERRORS):
        web.get_json(closed, timeout_s=2)
    assert web.answers(f"{server}/json") and not web.answers(f"{server}/missing") and not web.answers(closed)
