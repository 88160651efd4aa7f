"""The real exporter run with web configs written as for a Go exporter (exporter-toolkit's
format and meaning): an unverified client certificate with allowed SANs, header values that
are YAML numbers, a rate limit, one line at start for what is served differently; and a file
Go exporters refuse, refused at start with one line."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest

from tests.e2e.secure_exporter import SecureExporter
from tests.e2e.server import run_exporter
from tests.web.tlsfiles import Authority, Pair, write_web_config

pytestmark = pytest.mark.slow
SIM = ("--source", "simulated", "--scenario", "shared-workstation")


def _client(ca: Authority, cert: Pair | None) -> httpx.Client:
    context = ssl.create_default_context(cafile=str(ca.files.cert))
    if cert is not None:
        context.load_cert_chain(str(cert.cert), str(cert.key))
    return httpx.Client(verify=context, timeout=10)


def test_a_go_exporter_web_config_serves_with_its_meaning(tmp_path: Path) -> None:
    ca = Authority(tmp_path)
    server = ca.issue("server", "gpu-exporter")
    # RequireAnyClientCert: certificates from a CA the exporter does not know
    elsewhere = Authority(tmp_path, "elsewhere CA")
    prometheus = elsewhere.issue("prometheus", "prometheus", server=False, sans=("prometheus",))
    someone = elsewhere.issue("someone", "someone", server=False, sans=("someone",))
    web = write_web_config(tmp_path, (
        f"tls_server_config:\n  cert_file: {server.cert}\n  key_file: {server.key}\n"
        "  client_auth_type: RequireAnyClientCert\n  client_allowed_sans: [prometheus]\n"
        "http_server_config:\n  http2: true\n  headers:\n    X-XSS-Protection: 1\n"
        "    X-Frame-Options: sameorigin\n"
        "rate_limit:\n  interval: 1h\n  burst: 3\n"))
    with SecureExporter(*SIM, "--web.config.file", web) as proc:
        url = f"https://127.0.0.1:{proc.port}/metrics"
        for cert in (None, someone):  # refused in the handshake: no request, no token spent
            with pytest.raises(httpx.TransportError), _client(ca, cert) as client:
                client.get(url)
        with _client(ca, prometheus) as client:
            answers = [client.get(url) for _ in range(4)]
        assert [a.status_code for a in answers] == [200, 200, 200, 429]
        assert "gpu_memory_used_bytes" in answers[0].text
        for answer in answers:
            assert answer.headers["x-xss-protection"] == "1"
            assert answer.headers["x-frame-options"] == "sameorigin"
        lines = [line for line in proc.lines if "served differently from Go exporters" in line]
    assert len(lines) == 1, proc.log
    assert "HTTP/2 is not offered" in lines[0]


def test_a_file_go_exporters_refuse_is_refused_at_start_with_one_line(tmp_path: Path) -> None:
    web = write_web_config(tmp_path, "http_server_config:\n  headers:\n"
                           "    X-Frame-Options: DENY\n")  # Go compares exactly: deny
    result = run_exporter([*SIM, "--web.listen-address", "127.0.0.1:0",
                           "--web.config.file", web])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2
    assert len(lines) == 1, lines
    assert "http_server_config.headers.X-Frame-Options: invalid value 'DENY'" in lines[0]
