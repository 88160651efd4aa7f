"""The real exporter with a web config, as a subprocess on 127.0.0.1 (port from its log)."""

from __future__ import annotations

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
        # The socket listens before the port's log line; uvicorn serves from its own line.
        self.wait_until(lambda: any("Started server process" in line for line in self.lines),
                        "uvicorn's start", timeout)
