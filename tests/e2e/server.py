"""Start the real exporter as a subprocess on 127.0.0.1 (an ephemeral port) for e2e tests.

The server is started with ``--web.listen-address 127.0.0.1:0``; the port it got is read from
its "listening on ... (port N)" log line, so there is no free-port race.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx

from tests.processes import LoggedServer

ROOT = Path(__file__).resolve().parents[2]


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


class ExporterProcess(LoggedServer):
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
        # ``root`` first; what was on PYTHONPATH stays after it (the GPU machine's wheels).
        python_path = os.pathsep.join(
            part for part in (str(root), full_env.get("PYTHONPATH", "")) if part)
        super().__init__(
            exporter_command("--web.listen-address", "127.0.0.1:0", *args, module=module),
            cwd=root, env={**full_env, "PYTHONPATH": python_path},
        )
        try:
            self._wait_ready(ready_timeout, "/readyz" if wait_ready else "/healthz")
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float, path: str) -> None:
        self.wait_until(lambda: httpx.get(self.url(path), timeout=2).status_code == 200,
                        path, timeout, errors=(httpx.TransportError,))

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"
