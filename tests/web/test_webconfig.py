"""--web.config.file parsing: the exporter-toolkit format, strictly (one line per problem)."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest

from exporter.web.watcher import WebConfigWatcher
from exporter.web.webconfig import WebConfigError, load_web_config
from tests.web.tlsfiles import Authority, write_web_config

#: bcrypt of "secret" at cost 4, fixed: it appears in test ids, which must be the same at
#: every collection (pytest-xdist compares the workers' collections).
HASH = "$2b$04$p4z65PWCj4CcrPMrOqy.C.QnReaXRgB1YBIJdfBsuh9FMMwB3P98."


def _tls(ca: Authority, extra: str = "") -> str:
    server = ca.issue("server", "exporter")
    return (f"tls_server_config:\n  cert_file: {server.cert}\n  key_file: {server.key}\n"
            + extra)


def test_full_file_parses(tmp_path: Path, ca: Authority) -> None:
    text = _tls(ca, f"  client_ca_file: {ca.files.cert}\n  min_version: TLS13\n"
                "  client_auth_type: RequireAndVerifyClientCert\n"
                "  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\n"
                "  client_allowed_sans: [prometheus]\n") + (
        "http_server_config:\n  http2: true\n  headers:\n    X-Frame-Options: deny\n"
        f"basic_auth_users:\n  prom: '{HASH}'\n"
        "rate_limit:\n  interval: 10ms\n  burst: 50\n"
        "unauthenticated_paths: [/healthz]\n")
    config = load_web_config(write_web_config(tmp_path, text))
    assert config.tls is not None
    assert config.tls.client_auth == "RequireAndVerifyClientCert"
    assert config.tls.min_version is ssl.TLSVersion.TLSv1_3
    assert config.tls.client_allowed_sans == {"prometheus"}
    assert config.users == {"prom": HASH.encode()}
    assert config.headers == (("X-Frame-Options", "deny"),)
    assert config.rate_limit is not None
    assert config.rate_limit.burst == 50
    assert config.unauthenticated_paths == {"/healthz"}


def test_relative_files_are_relative_to_the_config(tmp_path: Path) -> None:
    Authority(tmp_path).issue("srv", "exporter")
    config = load_web_config(write_web_config(tmp_path, "tls_server_config:\n  cert_file: srv.crt\n"
                                              "  key_file: srv.key\n"))
    assert config.tls is not None
    assert config.tls.cert_file == str(tmp_path / "srv.crt")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("basic_auth_user:\n  a: b\n", "unknown key 'basic_auth_user'"),
        ("basic_auth_users:\n  prom: secret\n", "not a bcrypt hash"),
        (f"basic_auth_users:\n  'a:b': '{HASH}'\n", "without ':'"),
        ("tls_server_config:\n  cert_file: /nonexistent.crt\n  key_file: /nonexistent.key\n",
         "cannot read /nonexistent.crt"),
        ("tls_server_config:\n  key_file: /etc/hostname\n", "missing one of cert or cert_file"),
        ("http_server_config:\n  headers:\n    Set-Cookie: a\n",
         "HTTP header 'Set-Cookie' can not be configured"),
        ("http_server_config:\n  headers:\n    X-Frame-Options: \"a\\r\\nb\"\n", "invalid value"),
        ("http_server_config:\n  headers:\n    X-XSS-Protection: \"1\\0\"\n", "control character"),
        ("http_server_config:\n  http2: maybe\n", "true or false"),
        ("rate_limit:\n  interval: soon\n", "not a duration"),
        ("rate_limit:\n  interval: 1s\n  burst: '1'\n", "'1' is not an integer"),
        ("rate_limit:\n  interval: 1d\n", "'1d' is not a duration"),
        ("basic_auth_users:\n  a: x\nbasic_auth_users:\n  b: y\n",
         "line 3: key 'basic_auth_users' appears twice"),
        ("unauthenticated_paths: [/metrics]\n", "/metrics cannot be opened"),
        ("[1, 2]\n", "expected a mapping"),
        ("a: [\n", "line"),
        ("a: &x [1]\nb: *x\n", "aliases"),
        ("a: " + "[" * 50 + "]" * 50 + "\n", "nested deeper"),
    ],
)
def test_bad_files_fail_with_one_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(WebConfigError, match=None) as info:
        load_web_config(write_web_config(tmp_path, text))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("  min_version: TLS14\n", "unknown TLS version 'TLS14'"),
        ("  min_version: TLS13\n  max_version: TLS12\n", "min_version is above max_version"),
        ("  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n", "unknown cipher"),
        ("  client_auth_type: RequireSomeClientCert\n", "invalid ClientAuth"),
        ("  curve_preferences: [X448]\n", "unknown curve 'X448'"),
        ("  client_allowed_sans: [x]\n", "client_allowed_sans requires client_auth_type"),
        ("  colour: red\n", "unknown key 'colour'"),
    ],
)
def test_bad_tls_settings(tmp_path: Path, ca: Authority, extra: str, message: str) -> None:
    with pytest.raises(WebConfigError) as info:
        load_web_config(write_web_config(tmp_path, _tls(ca, extra)))
    assert message in str(info.value)


def test_mismatched_key_and_unreadable_certificate(tmp_path: Path, ca: Authority) -> None:
    one, other = ca.issue("one", "one"), ca.issue("other", "other")
    with pytest.raises(WebConfigError, match="cannot load the certificate and key"):
        load_web_config(write_web_config(tmp_path, f"tls_server_config:\n  cert_file: {one.cert}\n"
                                         f"  key_file: {other.key}\n"))
    garbage = tmp_path / "garbage.crt"
    garbage.write_text("not a certificate\n", encoding="utf-8")
    with pytest.raises(WebConfigError, match="cannot load the certificate and key"):
        load_web_config(write_web_config(tmp_path, f"tls_server_config:\n  cert_file: {garbage}\n"
                                         f"  key_file: {one.key}\n"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_key(tmp_path: Path, ca: Authority) -> None:
    pair = ca.issue("locked", "locked")
    pair.key.chmod(0)
    with pytest.raises(WebConfigError, match="key_file: cannot read"):
        load_web_config(write_web_config(tmp_path, f"tls_server_config:\n  cert_file: {pair.cert}\n"
                                         f"  key_file: {pair.key}\n"))


def test_inline_certificate_and_key(tmp_path: Path, ca: Authority) -> None:
    pair = ca.issue("inline", "inline")
    cert = pair.cert.read_text(encoding="utf-8").replace("\n", "\n    ")
    key = pair.key.read_text(encoding="utf-8").replace("\n", "\n    ")
    config = load_web_config(write_web_config(
        tmp_path, f"tls_server_config:\n  cert: |\n    {cert}\n  key: |\n    {key}\n"))
    assert config.tls is not None
    assert config.tls.cert_pem is not None


def test_watcher_reloads_users_and_keeps_last_good(tmp_path: Path) -> None:
    path = write_web_config(tmp_path, f"basic_auth_users:\n  prom: '{HASH}'\n")
    now = [0.0]
    watcher = WebConfigWatcher(path, check_interval=1.0, clock=lambda: now[0])
    Path(path).write_text(f"basic_auth_users:\n  other: '{HASH}'\n", encoding="utf-8")
    assert not watcher.maybe_reload()  # throttled
    now[0] = 2.0
    assert watcher.maybe_reload()
    assert set(watcher.current.users) == {"other"}
    Path(path).write_text("basic_auth_users:\n  other: plaintext\n", encoding="utf-8")
    now[0] = 4.0
    assert not watcher.maybe_reload()
    assert set(watcher.current.users) == {"other"}  # the bad file did not replace it
    assert watcher.reload_failures == 1


def test_watcher_refuses_turning_tls_on(tmp_path: Path, ca: Authority) -> None:
    path = write_web_config(tmp_path, f"basic_auth_users:\n  prom: '{HASH}'\n")
    now = [0.0]
    watcher = WebConfigWatcher(path, clock=lambda: now[0])
    Path(path).write_text(_tls(ca), encoding="utf-8")
    now[0] = 5.0
    assert not watcher.maybe_reload()
    assert watcher.current.tls is None


# --- bad paths, weakening settings, SIGHUP ----------------------------------------------------


def test_a_fifo_or_device_as_a_certificate_is_one_line_not_a_hang(
        tmp_path: Path, ca: Authority) -> None:
    pair = ca.issue("fifo", "fifo")
    fifo = tmp_path / "cert.fifo"
    os.mkfifo(fifo)
    for bad, problem in ((fifo, "is a FIFO, not a regular file"),
                         (Path("/dev/zero"), "is a character device, not a regular file")):
        with pytest.raises(WebConfigError) as info:
            load_web_config(write_web_config(tmp_path, f"tls_server_config:\n  cert_file: {bad}\n"
                                             f"  key_file: {pair.key}\n"))
        assert str(info.value) == (f"tls_server_config.cert_file: cannot read {bad}: {problem}")


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
def test_files_and_versions_that_weaken_security_are_warned_about(
        tmp_path: Path, ca: Authority) -> None:
    pair = ca.issue("weak", "weak")
    path = Path(write_web_config(tmp_path, f"tls_server_config:\n  cert_file: {pair.cert}\n"
                                 f"  key_file: {pair.key}\n"))
    assert load_web_config(str(path)).warnings == ()
    path.chmod(0o646)
    pair.cert.chmod(0o666)
    for version in ("TLS10", "TLS11"):
        path.write_text(f"tls_server_config:\n  cert_file: {pair.cert}\n  key_file: {pair.key}\n"
                        f"  min_version: {version}\n", encoding="utf-8")
        warnings = load_web_config(str(path)).warnings
        assert len(warnings) == 3, warnings
        assert warnings[0].startswith(f"{path} is writable by every user")
        assert warnings[2] == (f"tls_server_config.cert_file: {pair.cert} is writable by every "
                               "user (chmod o-w it)")
        assert warnings[1].startswith(f"tls_server_config.min_version: {version} allows TLS "
                                      "versions below 1.2")


@pytest.mark.parametrize(("interval", "message"), [
    ("9" * 400 + "s", "is out of range (-9223372036s to 9223372036s)"),
    ("3000000h", "is out of range"),  # beyond Go's time.Duration: refused there too
])
def test_rate_limit_numbers_go_through_the_range_table(
        tmp_path: Path, interval: str, message: str) -> None:
    with pytest.raises(WebConfigError) as info:
        load_web_config(write_web_config(tmp_path, f"rate_limit:\n  interval: '{interval}'\n"))
    assert message in str(info.value)
    with pytest.raises(WebConfigError, match=r"rate_limit.burst: '9+' is out of range"):
        load_web_config(write_web_config(tmp_path, "rate_limit:\n  interval: 1s\n  burst: "
                                         + "9" * 30 + "\n"))


def test_a_requested_reload_rereads_unchanged_files_and_reports_failures(tmp_path: Path) -> None:
    path = write_web_config(tmp_path, f"basic_auth_users:\n  prom: '{HASH}'\n")
    now = [0.0]
    watcher = WebConfigWatcher(path, check_interval=1.0, clock=lambda: now[0])
    outcomes: list[bool] = []
    watcher.on_reload = outcomes.append
    now[0] = 5.0
    assert not watcher.maybe_reload()  # unchanged: nothing to do
    watcher.request_reload()
    assert watcher.maybe_reload()  # asked for: read again, even within the interval
    assert watcher.reloads == 1
    Path(path).unlink()
    os.mkfifo(path)
    watcher.request_reload()
    assert not watcher.maybe_reload()
    assert outcomes == [True, False]
    assert set(watcher.current.users) == {"prom"}  # the last good one stays
