"""exporter-toolkit compatibility: a web config a Go exporter accepts means the same here, one
it refuses at start is refused with one line. Cases of our own, one per rule the toolkit's
tests check (docs/security.md, compatibility table); the runtime ones over real TLS
handshakes (certificates made by ``tlsfiles``) and real HTTP requests to the real server."""

from __future__ import annotations

import socket
import ssl
import time
from pathlib import Path

import httpx
import pytest

from exporter.web.webconfig import WebConfig, WebConfigError, load_web_config
from tests.web.serving import Running, serving
from tests.web.tlsfiles import Authority, Pair, write_web_config

# --- the file: accepted with Go's meaning, or refused with one line ---------------------------

#: ``{tls}`` becomes cert_file and key_file lines of a server certificate, ``{ca}`` the test
#: CA's file.
ACCEPTED: list[tuple[str, str, object]] = [
    ("{{}}\n", "tls", None),
    ("{tls}  client_auth_type: VerifyClientCertIfGiven\n", "client_auth",
     "VerifyClientCertIfGiven"),  # no client_ca_file: the system's roots verify
    ("{tls}  client_auth_type: RequireAndVerifyClientCert\n", "client_auth",
     "RequireAndVerifyClientCert"),
    ("{tls}  client_auth_type: RequireAnyClientCert\n  client_ca_file: {ca}\n", "client_auth",
     "RequireAnyClientCert"),
    ("{tls}  client_auth_type: RequireClientCert\n", "client_auth", "RequireAnyClientCert"),
    ("{tls}  client_auth_type: RequestClientCert\n", "client_auth", "RequestClientCert"),
    ("{tls}  client_auth_type: ''\n  min_version: null\n", "min_version",
     ssl.TLSVersion.TLSv1_2),
    ("{tls}  cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA, TLS_AES_128_GCM_SHA256,\n"
     "    TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n",
     "ciphers", ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384", "AES128-SHA")),
    ("{tls}  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA]\n"
     "http_server_config: {{http2: false}}\n", "ciphers", ("ECDHE-RSA-AES256-SHA",)),
    ("{tls}  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA]\n  min_version: TLS13\n",
     "ciphers", ("ECDHE-RSA-AES256-SHA",)),
    ("{tls}  curve_preferences: [CurveP521, X25519]\n", "groups", ("P-521", "X25519")),
    ("http_server_config:\n  headers:\n    X-XSS-Protection: 1\n    X-Frame-Options: sameorigin\n",
     "headers", (("X-XSS-Protection", "1"), ("X-Frame-Options", "sameorigin"))),
    ("rate_limit: {{interval: 0, burst: 0}}\n", "rate_limit", None),
    ("rate_limit: {{interval: -1s, burst: 5}}\n", "rate_limit", None),
    ("rate_limit: {{interval: 1000000000}}\n", "rate_limit", (1.0, 0)),  # nanoseconds
    ("rate_limit: {{interval: 1h30m, burst: 0}}\n", "rate_limit", (5400.0, 0)),
    ("rate_limit: {{interval: 1.5s, burst: 2.9}}\n", "rate_limit", (1.5, 2)),
    ("tls_server_config: {{min_version: TLS13}}\n", "tls", None),  # no certificate: no TLS
]

REFUSED: list[tuple[str, str]] = [
    # Go reads an empty file as no settings; here it is refused (docs/security.md): a file
    # caught half-written must never read as "no authentication".
    ("", "has no settings"),
    ("# only a comment\n", "has no settings"),
    ("tls_server_config:\n  cert_filse: a\n", "unknown key 'cert_filse'"),
    ("tls_server_config:\n  cert_file: ''\n  key_file: x\n", "missing one of cert or cert_file"),
    ("tls_server_config:\n  cert_file: x\n  key: ''\n", "missing one of key or key_file"),
    ("tls_server_config:\n  cert_file: ''\n  key_file: ''\n  client_auth_type: x\n",
     "missing one of cert or cert_file"),
    ("{tls}  client_ca_file: {ca}\n", "client_auth_type is NoClientCert"),
    ("{tls}  client_auth_type: Maybe\n", "invalid ClientAuth 'Maybe'"),
    ("{tls}  client_auth_type: RequireAndVerifyClientCert\n  client_ca: not a certificate\n",
     "cannot load the client CA"),
    ("{tls}  client_auth_type: VerifyClientCertIfGiven\n  client_allowed_sans: [a]\n",
     "client_allowed_sans requires client_auth_type"),
    ("{tls}  client_allowed_sans: [a]\n", "client_allowed_sans requires client_auth_type"),
    ("{tls}  client_auth_type: RequireAnyClientCert\n  client_allowed_sans: []\n",
     "client_allowed_sans is empty"),
    ("{tls}  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA2048]\n", "unknown cipher"),
    ("{tls}  cipher_suites: [TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305]\n", "unknown cipher"),
    ("{tls}  cipher_suites: [TLS_RSA_WITH_3DES_EDE_CBC_SHA]\n", "unknown cipher"),
    ("{tls}  cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]\n",
     "missing an HTTP/2-required AES_128_GCM_SHA256 cipher"),
    ("{tls}  curve_preferences: [CurveP257]\n", "unknown curve 'CurveP257'"),
    ("{tls}  min_version: TLS111\n", "unknown TLS version 'TLS111'"),
    ("basic_auth_users:\n  john: doe\n", "not a bcrypt hash"),
    ("http_server_config:\n  headers:\n    X-Content-Type-Options: sniff\n", "invalid value"),
    ("http_server_config:\n  headers:\n    X-Frame-Options: DENY\n", "invalid value"),
    ("http_server_config:\n  headers:\n    Content-Type: foo\n", "can not be configured"),
    ("rate_limit: {{interval: 1d}}\n", "not a duration"),
    ("rate_limit:\n  burst: 1\nrate_limit:\n  burst: 2\n", "'rate_limit' appears twice"),
]


def _file(tmp_path: Path, ca: Authority, template: str) -> str:
    server = ca.issue("server", "exporter")
    tls = f"tls_server_config:\n  cert_file: {server.cert}\n  key_file: {server.key}\n"
    return write_web_config(tmp_path, template.format(tls=tls, ca=ca.files.cert))


def _field(config: WebConfig, name: str) -> object:
    if name in ("tls", "headers"):
        return getattr(config, name)
    if name == "rate_limit":
        limit = config.rate_limit
        return None if limit is None else (limit.interval_seconds, limit.burst)
    assert config.tls is not None
    return getattr(config.tls, name)


@pytest.mark.parametrize(("template", "name", "expected"), ACCEPTED)
def test_what_go_exporters_accept_is_accepted_with_the_same_meaning(
        tmp_path: Path, ca: Authority, template: str, name: str, expected: object) -> None:
    assert _field(load_web_config(_file(tmp_path, ca, template)), name) == expected


@pytest.mark.parametrize(("template", "message"), REFUSED)
def test_what_go_exporters_refuse_at_start_is_refused_with_one_line(
        tmp_path: Path, ca: Authority, template: str, message: str) -> None:
    with pytest.raises(WebConfigError) as info:
        load_web_config(_file(tmp_path, ca, template))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_surprises_are_warned_about_and_differences_listed(tmp_path: Path, ca: Authority) -> None:
    config = load_web_config(_file(tmp_path, ca, "{tls}  curve_preferences: [X25519MLKEM768, "
                                   "X25519]\nhttp_server_config: {{http2: true}}\n"
                                   "rate_limit: {{interval: 1s}}\n"))
    assert config.warnings == ("rate_limit.burst is 0 (unset): every request is refused with "
                               "429, as in Go exporters; set it to 1 or more",)
    assert config.differences[-1] == ("http_server_config.http2: HTTP/2 is not offered "
                                      "(HTTP/1.1 only)")
    assert config.tls is not None
    if "X25519MLKEM768" not in config.tls.groups:  # OpenSSL before 3.5
        assert config.differences[0].startswith("curve_preferences: X25519MLKEM768 is not "
                                                "offered")
    tls_off = load_web_config(write_web_config(tmp_path, "tls_server_config: {min_version: "
                                               "TLS13}\n"))
    assert tls_off.warnings == ("tls_server_config names no certificate, key, CA or "
                                "client_auth_type: TLS is off (as in Go exporters)",)


# --- at run time: real handshakes, real requests ----------------------------------------------

REFUSED_CONNECTION = "refused"


def _request(port: int, ca: Authority, *, cert: Pair | None = None, ciphers: str | None = None,
             curve: str | None = None) -> tuple[str, str | None]:
    """GET /metrics over TLS: (status code or "refused", the cipher negotiated)."""
    context = ssl.create_default_context(cafile=str(ca.files.cert))
    if cert is not None:
        context.load_cert_chain(str(cert.cert), str(cert.key))
    if ciphers is not None:
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers(ciphers)
    if curve is not None:
        context.set_ecdh_curve(curve)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            head = tls.recv(4096)  # TLS 1.3: a refused client certificate surfaces here
            cipher = tls.cipher()
    except (OSError, ssl.SSLError):
        return REFUSED_CONNECTION, None
    if not head:
        return REFUSED_CONNECTION, None
    return head.split(b" ")[1].decode(), cipher[0] if cipher else None


def _status(port: int, ca: Authority, cert: Pair | None = None) -> str:
    return _request(port, ca, cert=cert)[0]


def _reload(server: Running, path: str, text: str, ca: Authority) -> None:
    """Rewrite the web config and wait until the server runs it."""
    Path(path).write_text(text, encoding="utf-8")
    reloads, deadline = server.watcher.reloads, time.monotonic() + 10
    while server.watcher.reloads == reloads:
        assert time.monotonic() < deadline, "the web config was not reloaded"
        _request(server.port, ca)  # connections are what triggers the check
        time.sleep(0.05)


def test_client_certificate_policies(
        tmp_path: Path, ca: Authority, monkeypatch: pytest.MonkeyPatch) -> None:
    server_pair = ca.issue("server", "exporter")
    tls = f"tls_server_config:\n  cert_file: {server_pair.cert}\n  key_file: {server_pair.key}\n"
    trusted = ca.issue("trusted", "prometheus", server=False, sans=("prometheus",))
    stranger_ca = Authority(tmp_path, "stranger CA")
    stranger = stranger_ca.issue("stranger", "prometheus", server=False, sans=("prometheus",))
    ipv6 = stranger_ca.issue("ipv6", "scraper", server=False, sans=("2001:db8::1",))
    other = stranger_ca.issue("other", "someone", server=False, sans=("someone-else",))
    # Without client_ca_file the verifying policies use the system's roots, which OpenSSL
    # reads from SSL_CERT_FILE when it is set: here, the test CA alone.
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.files.cert))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    path = write_web_config(tmp_path, tls + "  client_auth_type: RequireAnyClientCert\n"
                            "  client_allowed_sans: [prometheus, 2001:db8::1]\n")
    with serving(web_config=path) as server:
        port = server.port
        # RequireAnyClientCert: a certificate is required, its chain is not verified, its
        # SANs are (an IPv6 SAN compared as Go writes it).
        assert _status(port, ca, stranger) == "200"
        assert _status(port, ca, ipv6) == "200"
        assert _status(port, ca, other) == REFUSED_CONNECTION
        assert _status(port, ca) == REFUSED_CONNECTION

        _reload(server, path, tls + "  client_auth_type: RequestClientCert\n", ca)
        assert _status(port, ca) == "200"
        assert _status(port, ca, other) == "200"

        _reload(server, path, tls + "  client_auth_type: RequireAndVerifyClientCert\n", ca)
        assert _status(port, ca, trusted) == "200"
        assert _status(port, ca, stranger) == REFUSED_CONNECTION  # verified again
        assert _status(port, ca) == REFUSED_CONNECTION

        _reload(server, path, tls + "  client_auth_type: VerifyClientCertIfGiven\n", ca)
        assert _status(port, ca) == "200"
        assert _status(port, ca, trusted) == "200"
        assert _status(port, ca, stranger) == REFUSED_CONNECTION  # given, so verified


def test_cipher_preference_and_curves(tmp_path: Path, ca: Authority) -> None:
    pair = ca.issue("server", "exporter")  # an ECDSA key: the ECDSA suites
    tls = f"tls_server_config:\n  cert_file: {pair.cert}\n  key_file: {pair.key}\n"
    path = write_web_config(tmp_path, tls + "  max_version: TLS12\n  cipher_suites: [\n"
                            "    TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,\n"
                            "    TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\n")
    both = "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES128-GCM-SHA256"
    with serving(web_config=path) as server:
        port = server.port
        # Go's order of preference, whatever the order in the file or the client's
        assert _request(port, ca, ciphers=both) == ("200", "ECDHE-ECDSA-AES128-GCM-SHA256")
        assert _request(port, ca, ciphers="ECDHE-ECDSA-CHACHA20-POLY1305")[0] == \
            REFUSED_CONNECTION
        # curve_preferences: only those groups (TLS 1.3, where the certificate's curve is
        # not a key exchange group)
        _reload(server, path, tls + "  min_version: TLS13\n  curve_preferences: [CurveP521]\n",
                ca)
        assert _request(port, ca, curve="secp521r1")[0] == "200"
        assert _request(port, ca, curve="secp384r1")[0] == REFUSED_CONNECTION
        _reload(server, path, tls + "  min_version: TLS13\n", ca)  # removed: the defaults again
        assert _request(port, ca, curve="secp384r1")[0] == "200"


def test_rate_limit_burst_zero_and_header_values(tmp_path: Path) -> None:
    path = write_web_config(tmp_path, "rate_limit: {interval: 1s, burst: 0}\n"
                            "http_server_config:\n  headers:\n    X-XSS-Protection: 0\n"
                            "    Content-Security-Policy: \"default-src 'self'\\r\\n"
                            " https://exporter.example/\u00e9t\u00e9\"\n")
    with serving(web_config=path) as server, httpx.Client(timeout=5) as client:
        for _ in range(3):  # every request, the first included (x/time/rate's meaning)
            response = client.get(server.url("/metrics"))
            assert response.status_code == 429
            assert response.headers["x-xss-protection"] == "0"  # a YAML number, as its text
            assert response.headers["content-security-policy"] == (  # as Go writes it
                "default-src 'self'   https://exporter.example/\u00e9t\u00e9")
        Path(path).write_text("rate_limit: {interval: 0, burst: 0}\n", encoding="utf-8")
        deadline = time.monotonic() + 10  # reloaded on a later request
        while client.get(server.url("/metrics")).status_code == 429:
            assert time.monotonic() < deadline, "the web config was not reloaded"
            time.sleep(0.05)
        assert [client.get(server.url("/metrics")).status_code for _ in range(5)] == [200] * 5
