"""Load and fault bench: what one exporter holds, on loopback, bounded in count and time.

    python bench/bench_reliability.py [--seconds 5] [--scenario synthetic:8x32] [--quick]
                                      [--hostile-only]

Starts the real exporter (``python -m exporter --source simulated``) on 127.0.0.1 and prints
one table:

- load: N clients (50, 200, 1,000), each scraping /metrics once a second (a fleet of
  aggressive Prometheus servers), for ``--seconds``: requests, p50/p99, 503s shed, errors;
- hostile floods: 200 clients hammering one endpoint back to back (or holding idle, half-sent
  or TLS-stalled connections) while one well-behaved scraper asks /metrics every 0.5 s with a
  10 s timeout: the scraper's 200s of its requests, its p50/p99;
- faults: hostile bytes and connections, each followed by a scrape that must answer 200, and
  10,000 requests pipelined on one connection (every one must be answered);
- signals: SIGHUP while serving (reloads, logs one line, never ends it), SIGTERM (exit status
  and seconds);
- bad inputs: flags, variables and files (FIFOs, sparse files of a GiB, numbers out of range)
  that must exit 2 with one line, each within seconds;
- resident memory before and after, and the bytes of log written;
- then the hostile cases (``bench/hostile.py``), each against a fresh exporter, as a second
  table: cases tried and passed, resident memory under 200 clients that never read, and the
  seconds to exit after SIGTERM under each.

Everything runs on 127.0.0.1; the load generator shares the machine's cores with the
exporter, so latencies include its own CPU use.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import hostile  # noqa: E402
from tests.processes import stop  # noqa: E402

_PORT = re.compile(r"\(port (\d+)\)")


# --- the exporter under test -----------------------------------------------------------------


class Exporter:
    """The exporter as a subprocess; its stderr is counted (bytes) and kept (last lines)."""

    def __init__(self, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_EXPORTER_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "--web.listen-address", "127.0.0.1:0", *args],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.log_bytes = 0
        self.sighup_lines = 0  # log lines about SIGHUP
        self.tail: list[str] = []
        self.port = 0
        seen = threading.Event()

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.log_bytes += len(line)
                self.sighup_lines += b"SIGHUP" in line
                self.tail = [*self.tail[-20:], line.decode(errors="replace").rstrip()]
                match = _PORT.search(line.decode(errors="replace"))
                if match and not seen.is_set():
                    self.port = int(match.group(1))
                    seen.set()

        threading.Thread(target=read, daemon=True).start()
        if not seen.wait(60):
            raise RuntimeError(f"exporter did not start: {self.tail}")
        time.sleep(0.3)

    def rss_mib(self) -> float:
        return hostile.rss_mib(self.proc.pid)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int | None:
        return stop(self.proc, 15)


# --- a minimal HTTP/1.1 client on asyncio streams (1,000 clients in one process) ------------


@dataclass
class Tally:
    """Outcomes of one group of clients."""

    latencies: list[float] = field(default_factory=list)  # of 200s, seconds
    codes: dict[int, int] = field(default_factory=dict)
    errors: int = 0  # no response: refused, reset, timed out

    def add(self, code: int | None, seconds: float) -> None:
        if code is None:
            self.errors += 1
            return
        self.codes[code] = self.codes.get(code, 0) + 1
        if code == 200:
            self.latencies.append(seconds)

    @property
    def total(self) -> int:
        return sum(self.codes.values()) + self.errors

    def pct(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3


class Client:
    """One keep-alive connection; reconnects after an error or a close."""

    def __init__(self, port: int, path: str, headers: str = "",
                 context: ssl.SSLContext | None = None) -> None:
        self.port, self.path, self.headers, self.context = port, path, headers, context
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await self.writer.wait_closed()
        self.reader = self.writer = None

    async def get(self, timeout: float) -> int | None:
        try:
            return await asyncio.wait_for(self._get(), timeout)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError,
                ssl.SSLError):
            await self.close()
            return None

    async def _get(self) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(
                "127.0.0.1", self.port, ssl=self.context,
                server_hostname="127.0.0.1" if self.context else None)
        assert self.reader is not None
        self.writer.write(f"GET {self.path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          f"Accept-Encoding: gzip\r\n{self.headers}\r\n".encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        match = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
        if match is None:
            raise ValueError("no content-length")
        await self.reader.readexactly(int(match.group(1)))
        if re.search(rb"(?i)\r\nconnection: *close", head):
            await self.close()
        return status


async def paced(client: Client, tally: Tally, period: float, until: float,
                timeout: float = 10.0) -> None:
    """Ask once every ``period`` seconds (first at a random offset) until ``until``."""
    loop = asyncio.get_running_loop()
    await asyncio.sleep(period * (hash(id(client)) % 1000) / 1000)
    while loop.time() < until:
        started = loop.time()
        tally.add(await client.get(timeout), loop.time() - started)
        await asyncio.sleep(max(0.0, period - (loop.time() - started)))
    await client.close()


async def hammer(client: Client, tally: Tally, until: float) -> None:
    """Ask back to back until ``until``."""
    loop = asyncio.get_running_loop()
    while loop.time() < until:
        started = loop.time()
        tally.add(await client.get(5.0), loop.time() - started)
    await client.close()


# --- the sections of the table -----------------------------------------------------------------

Row = tuple[str, str]


async def load(port: int, clients: int, seconds: float) -> Row:
    loop = asyncio.get_running_loop()
    tally = Tally()
    until = loop.time() + seconds
    await asyncio.gather(*(paced(Client(port, "/metrics"), tally, 1.0, until)
                           for _ in range(clients)))
    shed = tally.codes.get(503, 0)
    other = tally.total - tally.codes.get(200, 0) - shed
    return (f"load: {clients} clients x 1 scrape/s, {seconds:g} s",
            f"{tally.total} requests ({tally.total / seconds:.0f}/s), 200s p50 "
            f"{tally.pct(0.5):.1f} ms p99 {tally.pct(0.99):.1f} ms, 503 shed {shed}, "
            f"errors {other}")


async def flood(port: int, name: str, attack: str, seconds: float) -> Row:
    """``attack`` runs in its own process (``--attack``) while one scraper asks every 0.5 s.

    The scraper is connected before the flood starts, as a Prometheus already scraping is.
    """
    scraper = Tally()
    client = Client(port, "/metrics", "X-Prometheus-Scrape-Timeout-Seconds: 10\r\n")
    if await client.get(10) != 200:
        return (f"flood: {name}", "scraper could not connect before the flood")
    attacker = subprocess.Popen(
        [sys.executable, __file__, "--attack", attack, "--port", str(port),
         "--seconds", str(seconds + 1.5)], cwd=ROOT)
    try:
        await asyncio.sleep(1.0)  # let the flood build up first
        loop = asyncio.get_running_loop()
        await paced(client, scraper, 0.5, loop.time() + seconds)
    finally:
        attacker.wait(seconds + 30)
    ok = scraper.codes.get(200, 0)
    other = {code: n for code, n in scraper.codes.items() if code != 200}
    return (f"flood: {name}",
            f"scraper {ok}/{scraper.total} x 200, p50 {scraper.pct(0.5):.1f} ms "
            f"p99 {scraper.pct(0.99):.1f} ms" + (f", other {other}" if other else "")
            + (f", no answer {scraper.errors}" if scraper.errors else ""))


async def attack(kind: str, port: int, seconds: float) -> None:
    """The hostile side: ``hammer:<path>``, ``idle:<n>`` or ``slowloris:<n>``."""
    what, _, arg = kind.partition(":")
    until = asyncio.get_running_loop().time() + seconds
    if what == "hammer":
        tally = Tally()
        await asyncio.gather(*(hammer(Client(port, arg), tally, until) for _ in range(200)))
        return
    first = b"" if what == "idle" else b"GET /metrics HTTP/1.1\r\nHost: x\r\n"

    async def one() -> None:
        loop = asyncio.get_running_loop()
        while loop.time() < until:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                if first:
                    writer.write(first)
                await asyncio.wait_for(reader.read(), max(0.01, until - loop.time()))
                writer.close()
            except (OSError, asyncio.TimeoutError):
                await asyncio.sleep(0.05)

    await asyncio.gather(*(one() for _ in range(int(arg))))


def raw_fault(port: int, payload: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(payload)
        sock.settimeout(5)
        with contextlib.suppress(OSError):
            sock.recv(65536)


def scrape_ok(port: int) -> bool:
    async def once() -> int | None:
        client = Client(port, "/metrics")
        code = await client.get(10)
        await client.close()
        return code
    return asyncio.run(once()) == 200


def faults(exporter: Exporter) -> list[Row]:
    port = exporter.port
    cases: list[tuple[str, Callable[[], None]]] = [
        ("1,100 idle connections at once",
         lambda: _many(port, 1100, b"")),
        ("1,100 half-sent request heads",
         lambda: _many(port, 1100, b"GET /metrics HTTP/1.1\r\nHost: x\r\n")),
        ("64 KiB request head", lambda: raw_fault(
            port, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 65536 + b"\r\n\r\n")),
        ("garbage bytes", lambda: raw_fault(port, os.urandom(4096))),
        ("non-ASCII path", lambda: raw_fault(port, b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n")),
        ("client gone mid-response", lambda: _abort(port)),
        ("TLS ClientHello to the plain port", lambda: raw_fault(port, bytes.fromhex(
            "16030100a1010000"))),
        ("HEAD, OPTIONS, POST, DELETE", lambda: [raw_fault(
            port, f"{m} /metrics HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            for m in ("HEAD", "OPTIONS", "POST", "DELETE")] and None),
    ]
    rows = []
    for name, run in cases:
        before = exporter.log_bytes
        run()
        ok = exporter.alive() and scrape_ok(port)
        rows.append((f"fault: {name}", f"{'survived' if ok else 'FAILED'}, "
                     f"log +{exporter.log_bytes - before} B"))
    return rows


def pipelined(port: int, count: int = 10_000) -> Row:
    """``count`` GETs of /healthz sent back to back on one connection, answers read alongside."""
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    answered = 0
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sender = threading.Thread(target=sock.sendall, args=(request * count,))
        sender.start()
        data = b""
        with contextlib.suppress(OSError):
            while answered < count:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
                answered += data.count(b"HTTP/1.1 200 ")
                data = data[data.rfind(b"HTTP/1.1 ") + 1:] if b"HTTP/1.1 " in data else data
        sender.join(20)
    return (f"fault: {count:,} requests pipelined on one connection",
            f"{answered:,}/{count:,} answered 200 in {time.monotonic() - started:.2f} s")


def _many(port: int, count: int, payload: bytes) -> None:
    socks = []
    for _ in range(count):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=2)
            if payload:
                sock.sendall(payload)
            socks.append(sock)
        except OSError:
            pass
    time.sleep(1.0)
    if not scrape_ok(port):
        raise RuntimeError("scrape failed while the connections were open")
    for sock in socks:
        sock.close()


def _abort(port: int) -> None:
    for _ in range(50):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            # Linger 0: close() sends RST, the response has nowhere to go.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


#: Contents that are not text: the file is made a FIFO, or a sparse file of 1 GiB.
FIFO, SPARSE = "<fifo>", "<sparse>"
BAD_INPUTS: list[tuple[list[str], dict[str, str], str]] = [
    (["--web.listen-address", "localhost"], {}, ""),
    (["--hostname", "\udcff\udcfe"], {}, ""),
    (["--collector.timeout", "1e400s"], {}, ""),
    (["--web.max-requests", "-1"], {}, ""),
    (["--web.read-header-timeout", "0"], {}, ""),
    (["--no-such-flag"], {}, ""),
    ([], {"GPU_EXPORTER_WEB_MAX_CONNECTIONS": "lots"}, ""),
    (["--web.config.file", "/nonexistent.yml"], {}, ""),
    (["--web.config.file", "{dir}/plaintext.yml"], {}, "basic_auth_users:\n  a: hunter2\n"),
    (["--web.config.file", "{dir}/unknown.yml"], {}, "tls_server_confg: {}\n"),
    (["--web.config.file", "{dir}/bomb.yml"], {},
     "a: &a [x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\nc: [*b,*b,*b,*b,*b,*b]\n"),
    (["--web.config.file", "{dir}/deep.yml"], {}, "a: " + "[" * 5000 + "]" * 5000 + "\n"),
    (["--source", "simulated", "--scenario", "synthetic:99999999x99999999"], {}, ""),
    (["--source", "simulated", "--scenario", "{dir}/inf.yaml"], {},
     "gpus: [{model: Tesla T4}]\nprocesses: [{gpu: 0, user: a, memory: .inf}]\n"),
    (["--source", "simulated", "--scenario", "{dir}/nan.yaml"], {},
     "gpus: [{model: Tesla T4, idle_celsius: .nan}]\n"),
    (["--source", "simulated", "--scenario", "{dir}/scenario-bomb.yaml"], {},
     "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
     "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"),
    (["--source", "simulated", "--scenario", "{dir}/scenario-deep.yaml"], {},
     "gpus: " + "[" * 100000 + "]" * 100000 + "\n"),
    (["--source", "simulated", "--scenario", "{dir}/huge-pid.yaml"], {},
     "gpus: [{model: Tesla T4}]\nprocesses: [{gpu: 0, user: a, pid: 99999999999999999999}]\n"),
    (["--collector.timeout", "99999999999w"], {}, ""),
    (["--web.read-header-timeout", "-1s"], {}, ""),
    ([], {"GPU_EXPORTER_SIMULATE_SPEED": "inf"}, ""),
    (["--passwd-file", "{dir}/passwd-fifo"], {}, FIFO),
    (["--web.config.file", "{dir}/web-fifo.yml"], {}, FIFO),
    (["--source", "simulated", "--scenario", "{dir}/sparse.yaml"], {}, SPARSE),
    (["--passwd-file", "{dir}/sparse-passwd"], {}, SPARSE),
    (["--passwd-file", "/dev/zero"], {}, ""),
    (["--web.config.file", "{dir}"], {}, ""),
]


def bad_inputs() -> Row:
    refused, slowest, failures = 0, 0.0, []
    with tempfile.TemporaryDirectory() as tmp:
        for template, env, content in BAD_INPUTS:
            args = [a.replace("{dir}", tmp) for a in template]
            if content == FIFO:
                os.mkfifo(args[-1])
            elif content == SPARSE:
                with open(args[-1], "wb") as handle:
                    handle.truncate(1 << 30)
            elif content:
                Path(args[-1]).write_text(content, encoding="utf-8")
            full_env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_EXPORTER_")}
            started = time.monotonic()
            result = subprocess.run(
                [sys.executable, "-m", "exporter", "--web.listen-address", "127.0.0.1:0", *args],
                cwd=ROOT, env={**full_env, **env}, capture_output=True, timeout=30, check=False)
            slowest = max(slowest, time.monotonic() - started)
            lines = [ln for ln in result.stderr.decode(errors="replace").splitlines()
                     if ln.strip()]
            if result.returncode == 2 and len(lines) == 1 and "Traceback" not in lines[0]:
                refused += 1
            else:
                failures.append(f"{args or env}: exit {result.returncode}, {len(lines)} lines")
    detail = f"{refused}/{len(BAD_INPUTS)} exit 2 with one line, slowest {slowest:.2f} s"
    if failures:
        detail += "; NOT: " + "; ".join(failures)
    return ("bad inputs refused", detail)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--scenario", default="synthetic:8x32")
    parser.add_argument("--quick", action="store_true", help="1 s per step (CI smoke)")
    parser.add_argument("--hostile-only", action="store_true",
                        help="only the hostile cases' table")
    parser.add_argument("--attack", help=argparse.SUPPRESS)  # the flood's hostile process
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.attack:
        asyncio.run(attack(args.attack, args.port, args.seconds))
        return 0
    seconds = 1.0 if args.quick else args.seconds
    if args.hostile_only:
        print(hostile.table(hostile.run_cases(args.scenario, seconds)))
        return 0
    exporter = Exporter("--source", "simulated", "--scenario", args.scenario,
                        "--log.level", "info")
    rows: list[Row] = []
    try:
        port = exporter.port
        scrape_ok(port)
        rows.append(("RSS before", f"{exporter.rss_mib():.1f} MiB"))
        for clients in (50, 200, 1000):
            rows.append(asyncio.run(load(port, clients, seconds)))
        floods = [
            ("200 x /metrics back to back", "hammer:/metrics"),
            ("200 x /api/v1/snapshot back to back", "hammer:/api/v1/snapshot"),
            ("200 x / (page) back to back", "hammer:/"),
            ("200 x /healthz back to back", "hammer:/healthz"),
            ("200 x /nope (404) back to back", "hammer:/nope"),
            ("1,500 idle connections (limit 1,024)", "idle:1500"),
            ("1,500 half-sent heads (slowloris)", "slowloris:1500"),
        ]
        for name, kind in floods:
            rows.append(asyncio.run(flood(port, name, kind, seconds + 1)))
        rows.extend(faults(exporter))
        rows.append(pipelined(port))
        rows.append(("RSS after", f"{exporter.rss_mib():.1f} MiB"))
        rows.append(("log written", f"{exporter.log_bytes} B in total"))
        exporter.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        hup = exporter.sighup_lines
        rows.append(("SIGHUP while serving", f"alive {exporter.alive()}, {hup} log line, "
                     f"scrape {'200' if scrape_ok(port) else 'FAILED'}"))
        rows.append(("exporter alive", str(exporter.alive())))
    finally:
        started = time.monotonic()
        code = exporter.stop()
        stop_seconds = time.monotonic() - started
    rows.append(("SIGTERM exit status", f"{code} after {stop_seconds:.2f} s"))
    rows.append(bad_inputs())
    width = max(len(name) for name, _ in rows)
    print(f"| {'what':<{width}} | result |\n|{'-' * (width + 2)}|---|")
    for name, detail in rows:
        print(f"| {name:<{width}} | {detail} |")
    print()
    print(hostile.table(hostile.run_cases(args.scenario, seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
