"""Standard-library helpers shared by the benchmarks and the GPU-machine scripts.

Nothing here imports the exporter or a third-party package, so the scripts built on it run on
the lent GPU machine (Python 3.12, no httpx) as well as here:

- ``Server``: a server subprocess on 127.0.0.1 (the exporter by default) whose port is read
  from its log line, ready once a path answers 200;
- ``Scraper``: a keep-alive HTTP/1.1 client over a raw socket (about 25 µs of client work per
  request, so 100,000 scrapes take as long as the server needs, not the client);
- ``rss_mb`` / ``cpu_seconds``: a process's resident memory and CPU time from ``/proc``;
- ``percentile``: nearest-rank percentiles for the tables.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.processes import LoggedServer

ROOT = Path(__file__).resolve().parent.parent
#: What Prometheus 3 sends: OpenMetrics preferred, gzip accepted.
PROMETHEUS_HEADERS: Mapping[str, str] = {
    "Accept": "application/openmetrics-text;version=1.0.0;escaping=underscores;q=0.5,"
              "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;q=0.3,"
              "text/plain;version=0.0.4;q=0.2,*/*;q=0.1",
    "Accept-Encoding": "gzip",
    "X-Prometheus-Scrape-Timeout-Seconds": "10",
}
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of ``values``, nearest rank."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def instructions_per_step(command: Sequence[str], few: int, many: int, *,
                          cwd: Path | None = None) -> float:
    """Instructions per step of ``command`` counted by valgrind's callgrind: the command is
    run with ``few`` and with ``many`` appended (its step count), and the difference divided
    by ``many - few``, so start-up cancels. Exits with valgrind's output on failure."""
    counts = []
    for steps in (few, many):
        out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                              *command, str(steps)], capture_output=True, text=True,
                             timeout=900, check=False, cwd=cwd)
        found = re.search(r"Collected : (\d+)", out.stderr)
        if out.returncode != 0 or found is None:
            raise SystemExit(f"counting instructions of {command[:3]} failed:\n"
                             f"{out.stderr[-3000:]}")
        counts.append(int(found.group(1)))
    return (counts[1] - counts[0]) / (many - few)


def timed_ms(fn: Callable[[], object], rounds: int, warmup: int) -> list[float]:
    """Milliseconds of each of ``rounds`` calls of ``fn``, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def rss_mb(pid: int | str = "self") -> tuple[float, float]:
    """Resident memory now and at its peak (VmRSS, VmHWM) in MiB."""
    fields: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def _stat_fields(pid: int | str) -> list[str]:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2:].split()  # from the state field on (proc(5) field 3)


def cpu_seconds(pid: int | str = "self") -> float:
    """User plus system CPU time of a process (all its threads) in seconds."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def minor_faults(pid: int | str = "self") -> int:
    """Minor page faults of a process so far (all its threads): pages it touched for the first
    time since they were mapped, such as a freshly mmapped block."""
    return int(_stat_fields(pid)[7])


class Scraper:
    """One keep-alive HTTP/1.1 connection; ``get`` returns (status, headers, body)."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 30.0) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self._sock: socket.socket | None = None
        self._buffer = b""
        self.connections = 0
        self._connect()
        self._requests: dict[tuple[str, tuple[tuple[str, str], ...]], bytes] = {}

    def _request(self, path: str, headers: Mapping[str, str]) -> bytes:
        key = (path, tuple(headers.items()))
        raw = self._requests.get(key)
        if raw is None:
            lines = [f"GET {path} HTTP/1.1", f"Host: {self.host}:{self.port}",
                     *(f"{k}: {v}" for k, v in headers.items())]
            raw = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
            self._requests[key] = raw
        return raw

    def get(self, path: str = "/metrics", headers: Mapping[str, str] = PROMETHEUS_HEADERS,
            ) -> tuple[int, dict[str, str], bytes]:
        """One request (reconnecting first if the server closed the last connection).

        Raises ``ConnectionError`` if the server closes the connection mid-response.
        """
        if self._sock is None:
            self._connect()
        assert self._sock is not None
        self._sock.sendall(self._request(path, headers))
        while b"\r\n\r\n" not in self._buffer:
            self._fill()
        head, _, rest = self._buffer.partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        response_headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            response_headers[name.strip().lower()] = value.strip()
        closing = (status_line.startswith("HTTP/1.0")
                   or response_headers.get("connection", "").lower() == "close")
        if "content-length" in response_headers:
            length = int(response_headers["content-length"])
            while len(rest) < length:
                rest += self._recv()
        else:  # HTTP/1.0 style: the body ends when the server closes
            while chunk := self._recv(eof_ok=True):
                rest += chunk
            length, closing = len(rest), True
        self._buffer = rest[length:]
        if closing:  # e.g. prometheus_client's wsgiref server: one request per connection
            self.close()
        return status, response_headers, rest[:length]

    def _connect(self) -> None:
        self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = b""
        self.connections += 1

    def _recv(self, eof_ok: bool = False) -> bytes:
        assert self._sock is not None
        chunk = self._sock.recv(1 << 18)
        if not chunk and not eof_ok:
            raise ConnectionError("server closed the connection")
        return chunk

    def _fill(self) -> None:
        self._buffer += self._recv()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> Scraper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Server(LoggedServer):
    """A server subprocess on 127.0.0.1; a context manager (SIGTERM, then kill, on exit).

    ``command`` must print ``(port N)`` on stderr (the exporter's start-up line) unless
    ``port`` is given; the server counts as up once ``ready_path`` answers 200.
    """

    def __init__(self, command: Sequence[str], *, port: int | None = None,
                 ready_path: str = "/readyz", ready_timeout: float = 60.0,
                 env: Mapping[str, str] | None = None) -> None:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_EXPORTER_")}
        full_env.update(env or {})
        super().__init__(command, cwd=ROOT, env=full_env, port=port, max_lines=2000)
        try:
            self.wait_until(lambda: self._answers(ready_path), ready_path, ready_timeout)
        except BaseException:
            self.stop()
            raise

    @classmethod
    def exporter(cls, *args: str, python: str = sys.executable, **kwargs: object) -> Server:
        """``python -m exporter`` on an ephemeral loopback port with ``args``."""
        command = [python, "-m", "exporter", "--web.listen-address", "127.0.0.1:0", *args]
        return cls(command, **kwargs)  # type: ignore[arg-type]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _answers(self, path: str) -> bool:
        with Scraper(self.port, timeout=5) as client:
            return client.get(path, {})[0] == 200


_SERVER_TOTAL = re.compile(r"total;dur=([0-9.]+)")


@dataclass
class Flood:
    """What ``hammer`` saw, by kind of answer: the HTTP status, with `` latest`` appended when
    the exporter's ``Server-Timing`` says the answer came from beyond ``--web.max-requests``,
    `` cached`` when it was answered at once from fresh data already rendered."""

    client_ms: dict[str, list[float]] = field(default_factory=dict)  # request sent -> body read
    server_ms: dict[str, list[float]] = field(default_factory=dict)  # Server-Timing total
    failures: list[str] = field(default_factory=list)  # transport errors

    def every(self) -> list[float]:
        return [ms for values in self.client_ms.values() for ms in values]


async def _hammer_one(port: int, request: bytes, deadline: float, flood: Flood) -> None:
    import asyncio  # noqa: PLC0415 - only the load benchmarks need it

    reader = writer = None
    while time.perf_counter() < deadline:
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            assert reader is not None
            start = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 2)[1])
            length, closing = 0, lines[0].startswith("HTTP/1.0")
            kind, server = str(status), None
            for line in lines[1:]:
                name, _, value = line.partition(":")
                name, value = name.lower(), value.strip()
                if name == "content-length":
                    length = int(value)
                elif name == "connection" and value.lower() == "close":
                    closing = True
                elif name == "server-timing":
                    mark = value.split(",", 1)[0]
                    kind += f" {mark}" if mark in ("latest", "cached") else ""
                    match = _SERVER_TOTAL.search(value)
                    server = float(match.group(1)) if match else None
            await reader.readexactly(length)
            flood.client_ms.setdefault(kind, []).append((time.perf_counter() - start) * 1e3)
            if server is not None:
                flood.server_ms.setdefault(kind, []).append(server)
            if closing:
                writer.close()
                reader = writer = None
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
            flood.failures.append(type(exc).__name__)
            if writer is not None:
                writer.close()
            reader = writer = None
            await asyncio.sleep(0.01)
    if writer is not None:
        writer.close()


def hammer(port: int, clients: int, seconds: float, path: str = "/metrics",
           headers: Mapping[str, str] = PROMETHEUS_HEADERS) -> Flood:
    """``clients`` keep-alive connections sending requests back to back for ``seconds``."""
    import asyncio  # noqa: PLC0415

    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}",
             *(f"{k}: {v}" for k, v in headers.items())]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    flood = Flood()

    async def run() -> None:
        deadline = time.perf_counter() + seconds
        await asyncio.gather(*(_hammer_one(port, request, deadline, flood)
                               for _ in range(clients)))

    asyncio.run(run())
    return flood
