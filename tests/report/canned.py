"""A stand-in for Prometheus' HTTP API on 127.0.0.1: each path answers with what the caller put
in ``answers`` (a JSON value, or bytes sent as they are), for the report's odd-answer tests and
the hostile bench."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

__all__ = ["EMPTY", "CannedPrometheus", "canned", "serve"]

#: What a path without a canned answer gets.
EMPTY: Mapping[str, Any] = {"status": "success", "data": []}


class CannedPrometheus(BaseHTTPRequestHandler):
    """Answers GET and POST with ``answer(path)``; a subclass may compute it, or refuse first
    by overriding ``respond``."""

    answers: ClassVar[Mapping[str, Any]] = {}

    def answer(self, path: str) -> Any:
        return self.answers.get(path, EMPTY)

    def respond(self) -> None:
        answer = self.answer(self.path.split("?")[0])
        body = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.respond()

    def do_POST(self) -> None:
        self.respond()

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[ThreadingHTTPServer]:
    """``handler`` served on 127.0.0.1 (a free port) until the block ends."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


def canned(answers: Mapping[str, Any]) -> type[CannedPrometheus]:
    """A handler class answering with ``answers``."""
    return type("Handler", (CannedPrometheus,), {"answers": answers})
