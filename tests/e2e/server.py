"""Start the real exporter as a subprocess on 127.0.0.1 (an ephemeral port) for e2e tests.

The server is started with ``--web.listen-address 127.0.0.1:0``; the port it got is read from
its "listening on ... (port N)" log line, so there is no free-port race.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx

from tests.processes import stop

ROOT = Path(__file__).resolve().parents[2]
_PORT = re.compile(r"\(port (\d+)\)")


def exporter_command(*args: str, module: str = "exporter") -> list[str]:
    """``python -m exporter ARGS`` (or another entry module) with this interpreter."""
    return [sys.executable, "-m", module, *args]


def run_exporter(
    args: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """Run the exporter to completion (for commands that must exit, e.g. bad flags)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_EXPORTER_")}
    full_env.update(env or {})
    return subprocess.run(
        exporter_command(*args), cwd=ROOT, env=full_env, capture_output=True, text=True,
        timeout=timeout, check=False,
    )


class ExporterProcess:
    """A running exporter; use as a context manager (stops it with SIGTERM on exit)."""

    def __init__(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        ready_timeout: float = 30,
        module: str = "exporter",
        wait_ready: bool = True,
        root: Path = ROOT,
    ) -> None:
        """Start the server; wait for /readyz (or with ``wait_ready=False`` for /healthz).

        ``root``: the checkout whose ``exporter`` package runs (benchmarks compare revisions).
        """
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_EXPORTER_")}
        full_env.update(env or {})
        self.lines: list[str] = []
        self._port_seen = threading.Event()
        self.port = 0
        self.proc = subprocess.Popen(
            exporter_command("--web.listen-address", "127.0.0.1:0", *args, module=module),
            cwd=root, env={**full_env, "PYTHONPATH": str(root)}, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            self._wait_ready(ready_timeout, "/readyz" if wait_ready else "/healthz")
        except BaseException:
            self.stop()
            raise

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            match = _PORT.search(line)
            if match and not self._port_seen.is_set():
                self.port = int(match.group(1))
                self._port_seen.set()

    def _wait_ready(self, timeout: float, path: str) -> None:
        deadline = time.monotonic() + timeout
        if not self._port_seen.wait(timeout):
            raise AssertionError(f"exporter did not start: {self.log}")
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"exporter exited {self.proc.returncode}: {self.log}")
            try:
                if httpx.get(self.url(path), timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"exporter not ready after {timeout}s: {self.log}")

    @property
    def log(self) -> str:
        return "\n".join(self.lines[-40:])

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> int:
        """Send ``sig`` and wait; kills after ``timeout`` (then the test fails on the code)."""
        code = stop(self.proc, timeout, sig)
        self._reader.join(5)
        return code

    def __enter__(self) -> ExporterProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
