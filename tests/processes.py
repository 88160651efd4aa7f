"""Subprocesses in tests: a free loopback port for them, stopping them so none outlives the
test, and a server whose port and log come from its stderr."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

#: The exporter's start-up line names the port it listens on: "... (port N)".
PORT_LINE = re.compile(r"\(port (\d+)\)")
_Server = TypeVar("_Server", bound="LoggedServer")


def last_line(text: str) -> str:
    """The last non-blank line of a program's output: where its refusal reason stands."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


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


class LoggedServer:
    """A server subprocess whose stderr is kept line by line (``lines``: all, or the first
    ``max_lines``) and whose port is ``port`` or, when not given, read from its start-up line
    (the exporter's, run with ``--web.listen-address 127.0.0.1:0``: no free-port race).
    A context manager: ``stop()`` on exit."""

    def __init__(self, command: Sequence[str], *, cwd: str | Path, env: Mapping[str, str],
                 port: int | None = None, max_lines: int | None = None,
                 open_files: int | None = None) -> None:
        """``open_files``: the server's RLIMIT_NOFILE (soft and hard), as ``ulimit -n``."""
        self.lines: list[str] = []
        self.port = port or 0
        self.port_seen = threading.Event()
        if port:
            self.port_seen.set()
        self._max_lines = max_lines
        if open_files is not None:  # the shell sets it, then becomes the server
            command = ["sh", "-c", f'ulimit -n {open_files} && exec "$0" "$@"', *command]
        self.proc = subprocess.Popen(list(command), cwd=cwd, env=dict(env),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if self._max_lines is None or len(self.lines) < self._max_lines:
                self.lines.append(line.rstrip("\n"))
            match = PORT_LINE.search(line)
            if match and not self.port_seen.is_set():
                self.port = int(match.group(1))
                self.port_seen.set()

    def wait_until(self, ready: Callable[[], bool], what: str, timeout: float,
                   errors: tuple[type[Exception], ...] = (OSError,)) -> None:
        """Once the port is known, poll ``ready()`` (``errors`` count as not yet).

        Raises:
            RuntimeError: no port logged, the process exited, or ``timeout`` seconds passed.
        """
        deadline = time.monotonic() + timeout
        if not self.port_seen.wait(timeout):
            raise RuntimeError(f"server did not log its port: {self.log}")
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}: {self.log}")
            try:
                if ready():
                    return
            except errors:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{what} not ready after {timeout}s: {self.log}")

    @property
    def log(self) -> str:
        return "\n".join(self.lines[-40:])

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> int:
        """Send ``sig`` and wait; kills after ``timeout``. The exit code."""
        code = stop(self.proc, timeout, sig)
        self._reader.join(5)
        return code

    def __enter__(self: _Server) -> _Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
