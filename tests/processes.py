"""Subprocesses in tests: a free loopback port for them, and stopping them so none outlives
the test."""

from __future__ import annotations

import signal
import socket
import subprocess
from collections.abc import Iterable
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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


def stop(proc: subprocess.Popen[Any], timeout: float, sig: int = signal.SIGTERM) -> int:
    """Send ``sig`` (SIGTERM) unless ``proc`` has exited, wait ``timeout`` seconds, then kill;
    its exit code (negative: the signal that ended it)."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode
