"""The real server (uvicorn, our socket, guards, TLS) on 127.0.0.1 in a thread, around a
small app: for tests of the web layer that need no exporter behind it."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from exporter.web.access import AccessMiddleware
from exporter.web.connections import ConnectionTable
from exporter.web.server import ServerLimits, build_server
from exporter.web.watcher import WebConfigWatcher


def small_app(slow_seconds: float = 0.0, gate: threading.Event | None = None) -> FastAPI:
    """/metrics, /healthz, /readyz, /api/v1/snapshot; the snapshot sleeps ``slow_seconds``
    (or, with ``gate``, waits until it is set)."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> str:
        return "up 1\n"

    @app.get("/healthz", response_class=PlainTextResponse)
    def healthz() -> str:
        return "ok\n"

    @app.get("/readyz", response_class=PlainTextResponse)
    def readyz() -> str:
        return "ready\n"

    @app.get("/api/v1/snapshot")
    def snapshot() -> dict[str, str]:
        if gate is not None:
            gate.wait(30)
        time.sleep(slow_seconds)
        return {"gpus": "none"}

    return app


@dataclass
class Running:
    """A server started by ``serving``."""

    port: int
    table: ConnectionTable
    admission: AccessMiddleware
    watcher: WebConfigWatcher
    server: Any  # the uvicorn.Server

    def url(self, path: str, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}{path}"


@contextmanager
def serving(app: Any = None, web_config: str | None = None,
            limits: ServerLimits | None = None) -> Iterator[Running]:
    """Serve ``app`` (default ``small_app()``) until the block ends."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    watcher = WebConfigWatcher(web_config, check_interval=0.05)
    server, guarded, admission = build_server(
        app if app is not None else small_app(), sock, watcher=watcher,
        limits=limits or ServerLimits(), metrics_path="/metrics",
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [guarded]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise AssertionError("server did not start")
        time.sleep(0.01)
    try:
        yield Running(port, server.connection_table, admission, watcher,  # type: ignore[attr-defined]
                      server)
    finally:
        server.should_exit = True
        thread.join(10)
        guarded.close()
