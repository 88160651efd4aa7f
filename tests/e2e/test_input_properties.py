"""Generated input against the real exporter process: every command line ends in exit 2 with
one line and no traceback, or in a server that answers its metrics path with 200 within 10 s;
every HTTP request to every route ends in a 2xx, 3xx, 4xx or 503, never a 500 or a connection
closed without an answer.

Bounded for the 2-core CI machine: the command lines are a fixed sample (``derandomize``) of
a few cases each starting a process; most of the flag space is covered in-process by
``tests/test_config_fuzz.py``. The HTTP cases share one server per module.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.config import FLAGS, Flag
from exporter.values import RANGES, Range, format_duration
from tests.e2e.server import ROOT, ExporterProcess
from tests.processes import PORT_LINE, stop
from tests.test_config_fuzz import typed_values
from tests.web.tlsfiles import write_web_config

pytestmark = pytest.mark.slow
SIM = ("--source", "simulated", "--scenario", "shared-workstation")
#: Answers a well-formed or malformed request may get; never 500, never nothing.
ACCEPTED = {*range(200, 500), 503}


def _text(limits: Range, value: float) -> str:
    if limits.duration:
        return format_duration(value)
    return str(int(value)) if float(value).is_integer() else repr(value)


# --- command lines ----------------------------------------------------------------------------


def _outcome(args: list[str], metrics_path: str = "/metrics") -> tuple[str, str]:
    """Run the exporter with ``args``: ("refused", last line) after exit 2, or ("served", "")
    once ``metrics_path`` answered 200 three times (1.1 s apart, so that collections run) and
    SIGTERM ended it with 0 within 5 s. Anything else fails the test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_EXPORTER_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "--web.listen-address", "127.0.0.1:0", *SIM, *args],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    lines: list[bytes] = []
    port: list[int] = []
    seen = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            match = PORT_LINE.search(line.decode("utf-8", "replace"))
            if match and not port:
                port.append(int(match.group(1)))
                seen.set()
        seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        seen.wait(30)
        text = b"".join(lines).decode("utf-8", "replace")
        if not port:
            proc.wait(10)
            reader.join(5)
            text = b"".join(lines).decode("utf-8", "replace")
            assert proc.returncode == 2, f"{args}: exit {proc.returncode}: {text[-2000:]}"
            assert "Traceback" not in text
            last = [line for line in text.splitlines() if line.strip()][-1]
            assert last.startswith("gpu-exporter: error: "), last
            return "refused", last
        for attempt in range(3):
            begin = time.monotonic()
            with httpx.Client(timeout=10) as client:
                status = client.get(f"http://127.0.0.1:{port[0]}{metrics_path}").status_code
            assert status == 200, f"{args}: {status}"
            assert time.monotonic() - begin < 10
            if attempt < 2:
                time.sleep(1.1)
        begin = time.monotonic()
        code = stop(proc, 10)
        assert code == 0, f"{args}: SIGTERM gave {code}"
        assert time.monotonic() - begin < 5
        reader.join(5)
        text = b"".join(lines).decode("utf-8", "replace")
        assert "Traceback" not in text, text[-3000:]
        return "served", ""
    finally:
        stop(proc, 5)


def _range_args(end: str) -> list[str]:
    args = []
    for name, limits in RANGES.items():
        if name.startswith("rate_limit."):
            continue  # web config keys, covered in tests/web
        value = limits.low if end == "low" else limits.high
        if name == "collector.min-interval":
            value = 0  # every scrape waits for a collection: where a huge timeout overflowed
        args.append(f"--{name}={_text(limits, value)}")
    return args


@pytest.mark.parametrize("end", ["low", "high"])
def test_every_flag_at_an_end_of_its_range_serves_metrics(end: str) -> None:
    if end == "low":
        # A 1 ms header timeout may close a connection before its head is read (by design);
        # the sweep runs every 0.5 s, so a scrape meets it rarely. Retried once.
        try:
            assert _outcome(_range_args(end)) == ("served", "")
        except (httpx.TransportError, AssertionError):
            assert _outcome(_range_args(end)) == ("served", "")
    else:
        assert _outcome(_range_args(end)) == ("served", "")


@pytest.mark.parametrize("args", [
    ["--collector.timeout", "99999999999w"],
    ["--web.read-header-timeout", "-1s"],
    ["--web.idle-timeout", "9" * 400 + "s"],
    ["--simulate.speed", "inf"],
    ["--web.max-connections", str(2**70)],
])
def test_out_of_range_values_are_refused_at_start(args: list[str]) -> None:
    state, line = _outcome(args)
    assert state == "refused"
    assert f"invalid value for {args[0]}: " in line
    assert "is out of range (" in line


#: Flags the sample leaves alone: the harness sets the address, the source and the log level
#: (it reads the port from an info line).
_HARNESS = {"web.listen-address", "source", "log.level"}
_SAMPLED = [flag for flag in FLAGS if flag.name not in _HARNESS]


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    flags: list[Flag] = draw(st.lists(st.sampled_from(_SAMPLED), min_size=1, max_size=3,
                                      unique_by=lambda f: f.name))
    args: list[str] = []
    for flag in flags:
        if flag.is_bool:
            args.append(draw(st.sampled_from([f"--{flag.name}", f"--no-{flag.name}",
                                              f"--{flag.name}=maybe"])))
        else:
            args.append(f"--{flag.name}={draw(typed_values(flag))}")
    return args


@settings(max_examples=10, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(args=command_lines())
def test_generated_command_lines_exit_2_or_serve(args: list[str]) -> None:
    path = next((a.split("=", 1)[1] for a in args if a.startswith("--web.telemetry-path=")),
                "/metrics")
    _outcome(args, metrics_path=path)


# --- HTTP -------------------------------------------------------------------------------------

ROUTES = ["/metrics", "/healthz", "/readyz", "/api/v1/snapshot", "/", "/docs", "/redoc",
          "/openapi.json", "/docs/oauth2-redirect", "/nope", "/metrics/", "//metrics"]
_TOKEN = st.text(alphabet="!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS"
                 "TUVWXYZ", min_size=1, max_size=20)
_BYTES = st.binary(max_size=200).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
_PRINTABLE = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126),
                     max_size=200).map(str.encode)
_HEADERS = st.sampled_from([
    b"Accept", b"Accept-Encoding", b"X-Prometheus-Scrape-Timeout-Seconds", b"Authorization",
    b"Content-Type", b"Connection", b"Transfer-Encoding", b"Expect", b"Range", b"Cookie",
    b"Upgrade", b"Host", b"If-None-Match", b"Origin",
]) | _TOKEN.map(str.encode)
_INTERESTING_VALUES = st.sampled_from([
    b"gzip", b"application/openmetrics-text; version=1.0.0", b"text/plain;q=0", b"*/*;q=nan",
    b"0", b"-1", b"nan", b"1e400", b"0.001", b"Basic !!!", b"Basic " + b"A" * 300,
    b"upgrade", b"websocket", b"h2c", b"close", b"keep-alive", b"chunked", b"100-continue",
    b"bytes=0-1", b"\xff\xfe", b"\x00",
])


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    known = st.sampled_from([b"GET", b"GET", b"GET", b"HEAD", b"POST", b"PUT", b"DELETE",
                             b"OPTIONS", b"PATCH", b"TRACE", b"CONNECT"])
    method = draw(st.one_of(known, known, known, _TOKEN.map(str.encode)))
    path = draw(st.sampled_from(ROUTES)).encode()
    path += draw(st.sampled_from([b"", b"?refresh=5", b"?refresh=-1", b"?refresh=x",
                                  b"?refresh=99999999999999999999", b"?a=%ff%fe", b"%2e%2e/",
                                  b"%00", b"/%ff", b"#frag", b"?" + b"q" * 2000]))
    # Mostly well-formed values (so that requests reach the routes), some raw bytes.
    values = st.one_of(_INTERESTING_VALUES, _PRINTABLE, _PRINTABLE, _PRINTABLE, _BYTES)
    headers = draw(st.lists(st.tuples(_HEADERS, values), max_size=5))
    body = draw(st.binary(max_size=300))
    lines = [method + b" " + path + b" HTTP/1.1", b"Host: 127.0.0.1"]
    lines += [name + b": " + value for name, value in headers
              if name.lower() not in (b"content-length", b"transfer-encoding", b"host")]
    chunked = draw(st.booleans())
    if chunked:
        lines.append(b"Transfer-Encoding: chunked")
        body = (b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)) if body else b"0\r\n\r\n"
    else:
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def _status(port: int, request: bytes) -> int:
    """The final status of the answer to ``request`` on a new connection (1xx skipped)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while True:
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    raise AssertionError(f"closed without an answer: {request[:300]!r} "
                                         f"(got {data[:200]!r})")
                data += chunk
            head, _, data = data.partition(b"\r\n\r\n")
            match = re.match(rb"HTTP/1\.[01] (\d{3}) ", head)
            assert match is not None, head
            status = int(match.group(1))
            if status >= 200:
                return status


@pytest.fixture(scope="module")
def plain_server() -> Iterator[ExporterProcess]:
    with ExporterProcess(*SIM, "--web.api-docs") as server:
        yield server


@pytest.fixture(scope="module")
def guarded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExporterProcess]:
    import bcrypt  # noqa: PLC0415

    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()
    path = write_web_config(tmp_path_factory.mktemp("web"), (
        f"basic_auth_users:\n  prom: '{hashed}'\nunauthenticated_paths: [/healthz]\n"
        "rate_limit: {interval: 1ms, burst: 20}\n"))
    with ExporterProcess(*SIM, "--web.api-docs", "--web.config.file", path,
                         wait_ready=False) as server:
        yield server


def _check_requests(server: ExporterProcess, request: bytes) -> None:
    status = _status(server.port, request)
    assert status in ACCEPTED, (status, request[:300])


@settings(max_examples=250, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(request=requests())
def test_any_request_to_any_route_is_answered_never_500(
        plain_server: ExporterProcess, request: bytes) -> None:
    _check_requests(plain_server, request)


@settings(max_examples=100, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(request=requests(), credentials=st.sampled_from([
    b"", b"Authorization: Basic cHJvbTpzZWNyZXQ=\r\n",  # prom:secret
    b"Authorization: Basic cHJvbTp3cm9uZw==\r\n"]))  # prom:wrong
def test_any_request_behind_auth_and_rate_limit_is_answered_never_500(
        guarded_server: ExporterProcess, request: bytes, credentials: bytes) -> None:
    head, sep, rest = request.partition(b"\r\n")
    _check_requests(guarded_server, head + sep + credentials + rest)


def test_servers_are_healthy_after_the_generated_requests(
        plain_server: ExporterProcess, guarded_server: ExporterProcess) -> None:
    assert httpx.get(plain_server.url("/metrics"), timeout=10).status_code == 200
    assert httpx.get(guarded_server.url("/metrics"), auth=("prom", "secret"),
                     timeout=10).status_code == 200
    for server in (plain_server, guarded_server):
        assert not any("Traceback" in line or "Exception in ASGI" in line
                       for line in server.lines), server.log


def test_a_request_not_sent_whole_is_closed_by_the_header_timeout_not_answered(
        tmp_path: Path) -> None:
    """The one case with no answer, by design: a head that never ends (slowloris)."""
    with ExporterProcess(*SIM, "--web.read-header-timeout", "1s") as server, \
            socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        begin = time.monotonic()
        assert sock.recv(1024) == b""
        assert 0.5 < time.monotonic() - begin < 5
