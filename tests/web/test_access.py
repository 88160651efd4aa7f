"""Admission over real connections: basic auth, TLS and mTLS, headers, gates, HEAD, rate
limit. Clients: httpx, Python's ssl, curl and openssl s_client (for the refusals)."""

from __future__ import annotations

import base64
import shutil
import socket
import ssl
import subprocess
import threading
import time
import warnings
from pathlib import Path

import anyio
import bcrypt
import httpx
import pytest

from exporter.web import access
from exporter.web.server import ServerLimits
from exporter.web.webconfig import WebConfig
from tests.web.serving import serving, small_app
from tests.web.tlsfiles import Authority, write_web_config

HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()


def _client(ca: Authority, cert: tuple[str, str] | None = None) -> httpx.Client:
    context = ssl.create_default_context(cafile=str(ca.files.cert))
    if cert is not None:
        context.load_cert_chain(*cert)
    return httpx.Client(verify=context, timeout=5)


def test_basic_auth_on_every_endpoint(tmp_path: Path) -> None:
    web = write_web_config(tmp_path, f"basic_auth_users:\n  prom: '{HASH}'\n")
    with serving(web_config=web) as server:
        for path in ("/metrics", "/healthz", "/readyz", "/api/v1/snapshot", "/", "/docs",
                     "/nope"):
            response = httpx.get(server.url(path), timeout=5)
            assert response.status_code == 401, path
            assert response.headers["www-authenticate"].startswith("Basic realm=")
        assert httpx.get(server.url("/metrics"), auth=("prom", "wrong")).status_code == 401
        assert httpx.get(server.url("/metrics"), auth=("nobody", "s3cret")).status_code == 401
        for header in ("Basic", "Basic !!!", "Bearer x", "Basic " + "A" * 10000):
            assert httpx.get(server.url("/metrics"),
                             headers={"Authorization": header}).status_code in (401, 431, 400)
        ok = httpx.get(server.url("/metrics"), auth=("prom", "s3cret"))
        assert ok.status_code == 200
        assert ok.text == "up 1\n"
        for _ in range(5):  # verified once, then from the cache
            assert httpx.get(server.url("/metrics"), auth=("prom", "s3cret")).status_code == 200
        assert server.admission.auth.bcrypt_checks == 2  # the one wrong password, the right one


def test_long_and_odd_passwords_are_refused_not_crashing(tmp_path: Path) -> None:
    web = write_web_config(tmp_path, f"basic_auth_users:\n  prom: '{HASH}'\n")
    with serving(web_config=web) as server:
        for password in ("x" * 100, "a\0b", "s3cret" + "x" * 70):
            response = httpx.get(server.url("/metrics"), auth=("prom", password))
            assert response.status_code == 401


def test_probes_open_only_when_the_file_says_so(tmp_path: Path) -> None:
    web = write_web_config(tmp_path, f"basic_auth_users:\n  prom: '{HASH}'\n"
                            "unauthenticated_paths: [/healthz]\n")
    with serving(web_config=web) as server:
        assert httpx.get(server.url("/healthz")).status_code == 200
        assert httpx.get(server.url("/readyz")).status_code == 401
        assert httpx.get(server.url("/metrics")).status_code == 401


def test_configured_headers_on_every_response(tmp_path: Path) -> None:
    web = write_web_config(tmp_path, f"basic_auth_users:\n  prom: '{HASH}'\n"
                            "http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
                            "    Strict-Transport-Security: max-age=60\n")
    with serving(web_config=web) as server:
        for response in (httpx.get(server.url("/metrics")),
                         httpx.get(server.url("/metrics"), auth=("prom", "s3cret"))):
            assert response.headers["x-frame-options"] == "deny"
            assert response.headers["strict-transport-security"] == "max-age=60"


def test_head_works_like_get_without_a_body() -> None:
    with serving() as server:
        head = httpx.head(server.url("/metrics"))
        assert head.status_code == 200
        assert head.content == b""
        assert head.headers["content-length"] == "5"


def test_tls_serves_and_refuses_plain_http(tmp_path: Path, ca: Authority) -> None:
    pair = ca.issue("server", "exporter")
    web = write_web_config(tmp_path, f"tls_server_config:\n  cert_file: {pair.cert}\n"
                            f"  key_file: {pair.key}\n")
    with serving(web_config=web) as server:
        with _client(ca) as client:
            assert client.get(server.url("/metrics", "https")).text == "up 1\n"
        with pytest.raises(httpx.TransportError):
            httpx.get(server.url("/metrics"), timeout=5)
        if shutil.which("curl"):
            plain = subprocess.run(["curl", "-sS", "--max-time", "5", server.url("/metrics")],
                                   capture_output=True, text=True, check=False)
            assert plain.returncode != 0
            assert "up 1" not in plain.stdout
        # TLS 1.0/1.1 are below the default min_version (TLS12).
        old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        old.check_hostname, old.verify_mode = False, ssl.CERT_NONE
        with warnings.catch_warnings():  # TLSv1_1 itself is deprecated: that is the point
            warnings.simplefilter("ignore", DeprecationWarning)
            old.maximum_version = ssl.TLSVersion.TLSv1_1
        with pytest.raises((ssl.SSLError, OSError)), socket.create_connection(
                ("127.0.0.1", server.port), timeout=5) as raw, old.wrap_socket(raw):
            pass


def test_mtls_requires_a_certificate_from_the_ca(tmp_path: Path, ca: Authority) -> None:
    pair = ca.issue("server", "exporter")
    client = ca.issue("client", "prometheus", server=False, sans=("prometheus",))
    stranger_ca = Authority(tmp_path, "stranger CA")
    stranger = stranger_ca.issue("stranger", "prometheus", server=False, sans=("prometheus",))
    web = write_web_config(tmp_path, f"tls_server_config:\n  cert_file: {pair.cert}\n"
                            f"  key_file: {pair.key}\n  client_ca_file: {ca.files.cert}\n"
                            "  client_auth_type: RequireAndVerifyClientCert\n"
                            "  client_allowed_sans: [prometheus]\n")
    other = ca.issue("other", "other", server=False, sans=("someone-else",))
    with serving(web_config=web) as server:
        with _client(ca, (str(client.cert), str(client.key))) as good:
            assert good.get(server.url("/metrics", "https")).status_code == 200
        for cert in (None, (str(stranger.cert), str(stranger.key)),
                     (str(other.cert), str(other.key))):
            with pytest.raises(httpx.TransportError), _client(ca, cert) as bad:
                bad.get(server.url("/metrics", "https"))


def test_rotated_certificate_is_served_without_restart(tmp_path: Path, ca: Authority) -> None:
    first = ca.issue("first", "first-cert")
    second = ca.issue("second", "second-cert")
    live_cert, live_key = tmp_path / "live.crt", tmp_path / "live.key"
    shutil.copy(first.cert, live_cert)
    shutil.copy(first.key, live_key)
    web = write_web_config(tmp_path, f"tls_server_config:\n  cert_file: {live_cert}\n"
                            f"  key_file: {live_key}\n")

    def served_name() -> str:
        context = ssl.create_default_context(cafile=str(ca.files.cert))
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            subject = dict(x[0] for x in tls.getpeercert()["subject"])  # type: ignore[index]
            return str(subject["commonName"])

    with serving(web_config=web) as server:
        assert served_name() == "first-cert"
        # A half-written rotation (new certificate, old key) is refused; the old pair stays.
        shutil.copy(second.cert, live_cert)
        deadline = time.monotonic() + 10
        while server.watcher.reload_failures < 1:  # connections trigger the check
            assert served_name() == "first-cert"
            assert time.monotonic() < deadline, "the half-written rotation was never read"
            time.sleep(0.02)
        assert served_name() == "first-cert"
        shutil.copy(second.key, live_key)
        deadline = time.monotonic() + 5
        while served_name() != "second-cert":
            assert time.monotonic() < deadline, "rotated certificate never served"
            time.sleep(0.05)


def test_every_class_has_its_own_gate_and_503_is_at_once() -> None:
    limits = ServerLimits(max_requests=2, max_other_requests=1)
    gate = threading.Event()
    with serving(small_app(gate=gate), limits=limits) as server:
        slow = threading.Thread(target=httpx.get, args=(server.url("/api/v1/snapshot"),),
                                kwargs={"timeout": 5})
        slow.start()
        deadline = time.monotonic() + 5
        while server.admission.in_flight["other"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        refused = httpx.get(server.url("/api/v1/snapshot"), timeout=5)
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        assert slow.is_alive()  # answered at once: the slow request still holds the gate
        assert httpx.get(server.url("/metrics")).status_code == 200  # another class: served
        assert httpx.get(server.url("/healthz")).status_code == 200
        gate.set()
        slow.join()


def test_rate_limit(tmp_path: Path) -> None:
    web = write_web_config(tmp_path, "rate_limit:\n  interval: 10s\n  burst: 2\n")
    with serving(web_config=web) as server:
        codes = [httpx.get(server.url("/metrics")).status_code for _ in range(4)]
        assert codes == [200, 200, 429, 429]


def test_wrong_password_flood_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    def slow_check(password: bytes, hashed: bytes) -> bool:
        time.sleep(0.2)
        return False

    monkeypatch.setattr(access, "_bcrypt_matches", slow_check)
    auth = access.BasicAuth()
    config = WebConfig(users={"prom": HASH.encode()})
    header = b"Basic " + base64.b64encode(b"prom:wrong")
    verdicts: list[bool | None] = []

    async def flood() -> None:
        async def one() -> None:
            verdicts.append(await auth.check(config, header))
        async with anyio.create_task_group() as group:
            for _ in range(40):
                group.start_soon(one)

    started = time.monotonic()
    anyio.run(flood)
    assert verdicts.count(None) == 40 - access.BCRYPT_QUEUE - access.BCRYPT_THREADS  # 503s
    assert verdicts.count(False) == access.BCRYPT_QUEUE + access.BCRYPT_THREADS
    assert auth.bcrypt_checks == access.BCRYPT_QUEUE + access.BCRYPT_THREADS
    assert time.monotonic() - started < 3  # 10 checks, 2 at a time, 0.2 s each
