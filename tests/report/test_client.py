"""The report's Prometheus client over real TLS (openssl-made CA, server and client
certificates), basic auth and bearer tokens, against a small stand-in of the /api/v1 API."""

from __future__ import annotations

import base64
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from exporter.report.client import Connection, PrometheusClient, ReportError
from tests.report.canned import CannedPrometheus

OPENSSL = shutil.which("openssl")
pytestmark = pytest.mark.skipif(OPENSSL is None, reason="needs the openssl command")


def _openssl(*args: str, cwd: Path) -> None:
    assert OPENSSL is not None
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@dataclass
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    for ca in ("ca", "other"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                 "-subj", f"/CN={ca}", "-keyout", f"{ca}.key", "-out", f"{ca}.pem", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", f"{name}.pem",
                 cwd=d)
    return Pki(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem",
               d / "client.key", d / "other.pem")


class Api(CannedPrometheus):
    """Answers like Prometheus: an empty rule list and one sample per query."""

    expected_auth: str | None = None

    def respond(self) -> None:
        if self.expected_auth is not None and self.headers.get("Authorization") != \
                self.expected_auth:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="prometheus"')
            self.end_headers()
            return
        super().respond()

    def answer(self, path: str) -> Any:
        if path.startswith("/api/v1/rules"):
            data: object = {"groups": []}
        else:
            data = {"resultType": "vector", "result": [{"metric": {}, "value": [1, "42"]}]}
        return {"status": "success", "data": data}


@dataclass
class Server:
    url: str
    handler: type[Api]


def _serve(pki: Pki, client_auth: bool, auth: str | None) -> Iterator[Server]:
    handler = type("Handler", (Api,), {"expected_auth": auth})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    if client_auth:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(pki.ca)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield Server(f"https://127.0.0.1:{httpd.server_address[1]}", handler)
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def tls(pki: Pki) -> Iterator[Server]:
    yield from _serve(pki, client_auth=False, auth=None)


@pytest.fixture
def mtls_basic(pki: Pki) -> Iterator[Server]:
    token = base64.b64encode(b"reporter:s3cret").decode()
    yield from _serve(pki, client_auth=True, auth=f"Basic {token}")


def test_verified_tls_works_and_an_unknown_ca_is_refused(tls: Server, pki: Pki) -> None:
    ok = PrometheusClient(Connection(url=tls.url, ca_file=pki.ca))
    assert ok.query("up", 1.0)[0].value == 42
    wrong = PrometheusClient(Connection(url=tls.url, ca_file=pki.other_ca))
    with pytest.raises(ReportError, match=r"not trusted.*--prometheus\.ca-file"):
        wrong.query("up", 1.0)
    skip = PrometheusClient(Connection(url=tls.url, ca_file=pki.other_ca,
                                       insecure_skip_verify=True))
    assert skip.query("up", 1.0)[0].value == 42


def test_mutual_tls_with_basic_auth(mtls_basic: Server, pki: Pki, tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text("s3cret\n")  # the trailing newline of `echo ... >` is not part of it
    client = PrometheusClient(Connection(
        url=mtls_basic.url, ca_file=pki.ca, cert_file=pki.client_cert,
        key_file=pki.client_key, username="reporter", password_file=password))
    assert client.query("up", 1.0)[0].value == 42
    password.write_text("wrong")
    refused = PrometheusClient(Connection(
        url=mtls_basic.url, ca_file=pki.ca, cert_file=pki.client_cert,
        key_file=pki.client_key, username="reporter", password_file=password))
    with pytest.raises(ReportError, match=r"refused the request \(401"):
        refused.query("up", 1.0)
    no_cert = PrometheusClient(Connection(url=mtls_basic.url, ca_file=pki.ca,
                                          username="reporter", password_file=password))
    with pytest.raises(ReportError, match="cannot reach Prometheus"):
        no_cert.query("up", 1.0)


def test_bearer_token_is_sent(pki: Pki, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc.def\n")
    for server in _serve(pki, client_auth=False, auth="Bearer abc.def"):
        client = PrometheusClient(Connection(url=server.url, ca_file=pki.ca,
                                             bearer_token_file=token))
        assert client.query("up", 1.0)[0].value == 42

