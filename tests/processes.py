"""Stopping the subprocesses a test started, so none outlives it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from typing import Any


def stop_all(processes: Iterable[subprocess.Popen[Any]], timeout: float) -> None:
    """Terminate every process still running, then wait for each; kill any that outlast
    ``timeout`` seconds (and wait for it as long again).

    Raises:
        subprocess.TimeoutExpired: a process survived even the kill.
    """
    procs = list(processes)
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
