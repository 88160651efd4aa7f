"""The real exporter with a web config, as a subprocess on 127.0.0.1 (port from its log)."""

from __future__ import annotations

import time

from tests.e2e.server import ExporterProcess


class SecureExporter(ExporterProcess):
    """``python -m exporter --source simulated ... --web.config.file FILE``; a context manager.

    Behind TLS or basic auth, ``/readyz`` does not answer plain HTTP: it counts as started once
    it logged its port.
    """

    def __init__(self, *args: str, timeout: float = 30) -> None:
        super().__init__(*args, ready_timeout=timeout)

    def _wait_ready(self, timeout: float, path: str) -> None:
        if not self.port_seen.wait(timeout):
            raise AssertionError(f"exporter did not start: {self.log}")
        time.sleep(0.2)  # the socket listens before the log line; uvicorn starts just after
