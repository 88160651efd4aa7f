"""Hostile cases of the reliability bench: each against a fresh exporter, each bounded.

    python bench/bench_reliability.py --hostile-only [--scenario synthetic:8x32]

One row per case: whether it passed, the exporter's resident memory at the worst moment
(where memory is the point), and the seconds from SIGTERM to its exit (within
``exporter.signals.STOP_DEADLINE_SECONDS``, without a traceback, for a pass):

- a basic-auth web config rewritten in place (truncate, a part, the rest) every 25 ms with a
  SIGHUP every 30 ms, while unauthenticated scrapes run: not one 200;
- 3 bursts of 400 connections under ``ulimit -n 256``: no EMFILE, one log line a burst;
- 200 clients that send requests and never read (``/api/v1/snapshot`` pipelined 400 times,
  ``/metrics`` 24 times): resident memory bounded, a scrape still answered, SIGTERM in time;
- ``gpu-exporter report`` against malformed Prometheus answers: exit 2 with one line each;
  NaN/Inf values: strict JSON;
- SIGINT from the first moment the exporter's code runs to 300 ms later: exit 0 without
  a traceback;
- a busy and an unresolvable listen address: exit 2 with one line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from exporter.signals import STOP_DEADLINE_SECONDS  # noqa: E402
from tests.report.canned import canned, serve  # noqa: E402

BAD_LOG = ("Traceback", "EMFILE", "Too many open files", "out of system resource",
           "graceful shutdown exceeded")


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid`` in MiB (NaN where /proc does not say)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


@dataclass
class Case:
    """One row: a case, whether it passed, worst resident memory, seconds to exit."""

    name: str
    passed: bool
    rss_mib: float | None = None
    exit_seconds: float | None = None
    detail: str = ""


class Server:
    """``python -m exporter`` on 127.0.0.1:0, its stderr kept; optionally ``ulimit -n``."""

    def __init__(self, *args: str, open_files: int | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_EXPORTER_")}
        command = [sys.executable, "-m", "exporter", "--web.listen-address", "127.0.0.1:0",
                   *args]
        if open_files is not None:
            command = ["sh", "-c", f'ulimit -n {open_files} && exec "$0" "$@"', *command]
        self.proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.port = 0
        seen = threading.Event()

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.lines.append(line.rstrip())
                match = re.search(r"\(port (\d+)\)", line)
                if match and not seen.is_set():
                    self.port = int(match.group(1))
                    seen.set()

        threading.Thread(target=read, daemon=True).start()
        if not seen.wait(60):
            raise RuntimeError(f"exporter did not start: {self.lines[-5:]}")
        deadline = time.monotonic() + 30
        while not any("Started server process" in line for line in self.lines):
            if time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)

    def rss_mib(self) -> float:
        return rss_mib(self.proc.pid)

    def get(self, path: str = "/metrics", auth: str | None = None) -> int:
        """Status of one GET (0: no answer)."""
        head = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        if auth:
            head += f"Authorization: Basic {auth}\r\n"
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=10) as sock:
                sock.sendall((head + "\r\n").encode())
                answer = sock.recv(64)
            return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0
        except (OSError, ValueError, IndexError):
            return 0

    def stop(self) -> tuple[int | None, float]:
        """SIGTERM; (exit status, seconds to exit)."""
        began = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code: int | None = self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            code = None
        return code, time.monotonic() - began

    def clean_exit(self) -> tuple[bool, float]:
        """SIGTERM: exit 0 within the bound, no traceback or EMFILE in the whole log."""
        code, seconds = self.stop()
        time.sleep(0.2)  # the reader thread takes the last lines
        bad = [line for line in self.lines if any(b in line for b in BAD_LOG)]
        return code == 0 and seconds < STOP_DEADLINE_SECONDS and not bad, seconds


def web_config_race(seconds: float) -> Case:
    import base64  # noqa: PLC0415

    import bcrypt  # noqa: PLC0415

    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()
    text = (f"basic_auth_users:\n  prom: '{hashed}'\n"
            "unauthenticated_paths: [/healthz]\n").encode()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "web.yml"
        path.write_bytes(text)
        server = Server("--source", "simulated", "--scenario", "shared-workstation",
                        "--web.config.file", str(path))
        stop = threading.Event()
        cut = text.index(b"  prom")

        def edit() -> None:
            while not stop.is_set():
                with path.open("wb") as handle:
                    handle.flush()
                    stop.wait(0.004)
                    handle.write(text[:cut])
                    handle.flush()
                    stop.wait(0.004)
                    handle.write(text[cut:])
                stop.wait(0.02)

        def hang_up() -> None:
            while not stop.wait(0.03):
                server.proc.send_signal(signal.SIGHUP)

        threads = [threading.Thread(target=edit), threading.Thread(target=hang_up)]
        for thread in threads:
            thread.start()
        codes: dict[int, int] = {}
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            code = server.get()
            codes[code] = codes.get(code, 0) + 1
        stop.set()
        for thread in threads:
            thread.join(10)
        path.write_bytes(text)
        server.proc.send_signal(signal.SIGHUP)
        token = base64.b64encode(b"prom:secret").decode()
        authorised = server.get(auth=token)
        ok, exit_seconds = server.clean_exit()
    passed = ok and codes.get(200, 0) == 0 and codes.get(401, 0) > 0 and authorised == 200
    return Case(f"web config rewritten + SIGHUP for {seconds:g} s, unauthenticated scrapes",
                passed, None, exit_seconds,
                f"{codes.get(200, 0)} x 200 of {sum(codes.values())}, then 200 with the password")


def fd_flood(scenario: str) -> Case:
    server = Server("--source", "simulated", "--scenario", scenario,
                    "--web.read-header-timeout", "1s", open_files=256)
    socks: list[socket.socket] = []
    try:
        for _ in range(3):
            for _ in range(400):
                sock = socket.socket()
                sock.setblocking(False)
                sock.connect_ex(("127.0.0.1", server.port))
                socks.append(sock)
            time.sleep(1.2)  # past the grace period and the header timeout: churn
        scrape = server.get()
        rss = server.rss_mib()
    finally:
        for sock in socks:
            sock.close()
    ok, seconds = server.clean_exit()
    limit_lines = sum("connection limit" in line for line in server.lines)
    return Case("3 x 400 connections under ulimit -n 256", ok and scrape == 200 and
                limit_lines <= 3, rss, seconds,
                f"scrape {scrape}, {limit_lines} limit log lines, no EMFILE: {ok}")


def non_reading(scenario: str, path: str, pipelined: int) -> Case:
    server = Server("--source", "simulated", "--scenario", scenario)
    before = server.rss_mib()
    socks = []
    peak = before
    for _ in range(200):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", server.port))
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode() * pipelined)
        socks.append(sock)
    latencies = []
    for _ in range(6):
        time.sleep(0.5)
        began = time.monotonic()
        scrape = server.get()
        latencies.append(time.monotonic() - began)
        peak = max(peak, server.rss_mib())
    ok, seconds = server.clean_exit()
    for sock in socks:
        sock.close()
    return Case(f"200 clients never reading {path} ({pipelined} requests each)",
                ok and scrape == 200 and peak - before < 150, peak, seconds,
                f"RSS {before:.0f} -> {peak:.0f} MiB, scrape {scrape}, slowest scrape "
                f"{max(latencies):.2f} s")


def report_answers() -> Case:
    from exporter.catalogue import records  # noqa: PLC0415

    rules = {"status": "success", "data": {"groups": [{"name": records.GROUP, "interval": 60}]}}
    vector = {"resultType": "vector", "result": [
        {"metric": {"__report_field": records.IDLE_GPUS, "user": "a"}, "value": [1, v]}
        for v in ("NaN", "+Inf", "1e300", "-5", "1")]}
    bad: list[dict[str, Any]] = [
        {"/api/v1/rules": {"status": "success", "data": None}},
        {"/api/v1/rules": {"status": "success", "data": {"groups": [
            {"name": records.GROUP, "interval": {"x": 1}}]}}},
        {"/api/v1/rules": rules, "/api/v1/query": {"status": "success", "data": {
            "resultType": "vector", "result": [{"value": [1, "1"]}]}}},
        {"/api/v1/rules": rules, "/api/v1/query": {"status": "success", "data": {
            "resultType": "string", "result": [1, "x"]}}},
    ]
    refused = strict = 0
    for answers in [*bad, {"/api/v1/rules": rules,
                           "/api/v1/query": {"status": "success", "data": vector}}]:
        with serve(canned(answers)) as httpd:
            result = subprocess.run(
                [sys.executable, "-m", "exporter", "report", "--prometheus.url",
                 f"http://127.0.0.1:{httpd.server_address[1]}", "--since", "1d",
                 "--no-progress", "--format", "json"],
                cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        if answers.get("/api/v1/query", {}).get("data") is vector:
            try:
                json.loads(result.stdout, parse_constant=lambda name: 1 / 0)
                strict += result.returncode == 0 and '"notes"' in result.stdout
            except (ValueError, ZeroDivisionError):
                pass
        elif result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr:
            refused += 1
    return Case("gpu-exporter report: malformed answers, NaN/Inf values",
                refused == len(bad) and strict == 1, None, None,
                f"{refused}/{len(bad)} exit 2 with one line; strict JSON with a note: "
                f"{bool(strict)}")


def _caught(pid: int, signum: int) -> bool:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        mask = next(int(line.split()[1], 16) for line in status if line.startswith("SigCgt:"))
    return bool(mask & (1 << (signum - 1)))


def sigint_at_start() -> Case:
    """SIGINT from the first moment the exporter's code runs (its entry point catches SIGTERM
    first thing), then 50 to 300 ms later. Before that moment the interpreter is still
    starting (site, runpy) and prints its own traceback whatever a program does."""
    delays = (0.0, 0.05, 0.1, 0.2, 0.3)
    clean, slowest = 0, 0.0
    for delay in delays:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_EXPORTER_")}
        proc = subprocess.Popen([sys.executable, "-m", "exporter", "--web.listen-address",
                                 "127.0.0.1:0", "--source", "simulated", "--scenario",
                                 "shared-workstation"], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not _caught(proc.pid, signal.SIGTERM) and time.monotonic() < deadline:
            time.sleep(0.0005)
        time.sleep(delay)
        began = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
        slowest = max(slowest, time.monotonic() - began)
        clean += proc.returncode == 0 and b"Traceback" not in err
    return Case("SIGINT at 0 to 300 ms after the exporter's code starts", clean == len(delays),
                None, slowest, f"{clean}/{len(delays)} exit 0 without a traceback")


def listen_errors() -> Case:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_EXPORTER_")}
    ok = 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        for address in (f"127.0.0.1:{port}", f"no-such-host.invalid:{port}"):
            result = subprocess.run(
                [sys.executable, "-m", "exporter", "--web.listen-address", address,
                 "--source", "simulated", "--scenario", "synthetic:1x1"],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
            last = [line for line in result.stderr.splitlines() if line.strip()][-1:]
            ok += (result.returncode == 2 and "Traceback" not in result.stderr
                   and bool(last) and last[0].startswith("gpu-exporter: error: "))
    return Case("busy and unresolvable listen address", ok == 2, None, None,
                f"{ok}/2 exit 2 with one error line")


def run_cases(scenario: str, seconds: float) -> list[Case]:
    """Every case, in order (each starts and stops its own exporter)."""
    steps: list[Callable[[], Case]] = [
        lambda: web_config_race(seconds),
        lambda: fd_flood(scenario),
        lambda: non_reading(scenario, "/api/v1/snapshot", 400),
        lambda: non_reading(scenario, "/metrics", 24),
        report_answers,
        sigint_at_start,
        listen_errors,
    ]
    return [step() for step in steps]


def table(cases: list[Case]) -> str:
    """The cases as a Markdown table, with the tally first."""
    passed = sum(case.passed for case in cases)
    lines = [f"hostile cases tried {len(cases)}, passed {passed}", "",
             "| case | passed | RSS (MiB) | exit after the signal (s) | detail |",
             "|---|---|---|---|---|"]
    for case in cases:
        rss = "-" if case.rss_mib is None else f"{case.rss_mib:.0f}"
        took = "-" if case.exit_seconds is None else f"{case.exit_seconds:.2f}"
        lines.append(f"| {case.name} | {'yes' if case.passed else 'NO'} | {rss} | {took} | "
                     f"{case.detail} |")
    return "\n".join(lines)
