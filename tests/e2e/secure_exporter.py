"""The real exporter with a web config, as a subprocess on 127.0.0.1 (port from its log)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_PORT = re.compile(r"\(port (\d+)\)")


class SecureExporter:
    """``python -m exporter --source simulated ... --web.config.file FILE``; a context manager."""

    def __init__(self, *args: str, timeout: float = 30) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_EXPORTER_")}
        self.lines: list[str] = []
        self.port = 0
        self._seen = threading.Event()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "--web.listen-address", "127.0.0.1:0", *args],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._seen.wait(timeout):
            self.stop()
            raise AssertionError(f"exporter did not start: {self.log}")

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            match = _PORT.search(line)
            if match and not self._seen.is_set():
                self.port = int(match.group(1))
                self._seen.set()

    @property
    def log(self) -> str:
        return "\n".join(self.lines[-40:])

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)
        return self.proc.returncode

    def __enter__(self) -> SecureExporter:
        time.sleep(0.2)  # the socket listens before the log line; uvicorn starts just after
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
