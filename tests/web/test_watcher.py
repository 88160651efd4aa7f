"""The web config's reload fails closed: a file that is empty, unreadable, half-written or
invalid, or that drops an authentication without saying so, keeps the last good config."""

from __future__ import annotations

from pathlib import Path

import bcrypt
import pytest

from exporter.web.watcher import WebConfigWatcher
from exporter.web.webconfig import WebConfigError, load_web_config
from tests.web.tlsfiles import Authority, write_web_config

HASH = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()
PROTECTED = (f"# who may scrape\nbasic_auth_users:\n  prom: '{HASH}'\n  other: '{HASH}'\n"
             "unauthenticated_paths: [/healthz]\n")


class _Reloads:
    """A watcher on ``path`` whose reloads are asked for (as SIGHUP does) and recorded."""

    def __init__(self, path: str) -> None:
        self.watcher = WebConfigWatcher(path, check_interval=3600, clock=lambda: 0.0)
        self.outcomes: list[bool] = []
        self.watcher.on_reload = self.outcomes.append

    def reload(self) -> bool:
        self.watcher.request_reload()
        return self.watcher.maybe_reload()


def _replace(path: Path, text: str) -> None:
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    elif path.exists() or path.is_symlink():
        path.unlink()
    path.write_text(text, encoding="utf-8")


@pytest.mark.parametrize(("name", "make", "message"), [
    ("empty", lambda p: p.write_text(""), "has no settings (empty, or only comments)"),
    ("comment only", lambda p: p.write_text("# rotated by the config manager\n"),
     "has no settings"),
    ("a lone null", lambda p: p.write_text("~\n"), "has no settings"),
    ("the users key without users", lambda p: p.write_text("basic_auth_users:\n"),
     "authentication is only removed by an explicit 'basic_auth_users: {}'"),
    ("a valid file without users", lambda p: p.write_text("unauthenticated_paths: [/healthz]\n"),
     "basic_auth_users: the file has no users now"),
    ("a hash cut short", lambda p: p.write_text(f"basic_auth_users:\n  prom: '{HASH[:30]}'\n"),
     "not a bcrypt hash"),
    ("a directory", lambda p: (p.unlink(), p.mkdir()), "Is a directory"),
    ("a dangling link", lambda p: (p.unlink(), p.symlink_to(p.parent / "gone")),
     "cannot read"),
    ("a scalar", lambda p: p.write_text("basic_auth_"), "expected a mapping"),
])
def test_a_bad_reload_keeps_the_users_and_says_so(
        tmp_path: Path, name: str, make: object, message: str,
        caplog: pytest.LogCaptureFixture) -> None:
    path = Path(write_web_config(tmp_path, PROTECTED))
    reloads = _Reloads(str(path))
    make(path)  # type: ignore[operator]
    assert not reloads.reload(), name
    assert set(reloads.watcher.current.users) == {"prom", "other"}
    assert not reloads.watcher.last_reload_successful
    assert reloads.outcomes == [False]
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1, errors
    assert message in errors[0], errors
    _replace(path, PROTECTED.replace("other", "third"))  # a good file: reloaded, and says so
    assert reloads.reload()
    assert set(reloads.watcher.current.users) == {"prom", "third"}
    assert reloads.watcher.last_reload_successful
    assert reloads.outcomes == [False, True]


def test_authentication_goes_only_with_an_explicit_empty_mapping(tmp_path: Path) -> None:
    path = Path(write_web_config(tmp_path, PROTECTED))
    reloads = _Reloads(str(path))
    path.write_text("basic_auth_users: {}\n", encoding="utf-8")
    assert reloads.reload()
    assert not reloads.watcher.current.users
    path.write_text("unauthenticated_paths: [/healthz]\n", encoding="utf-8")
    assert reloads.reload()  # nothing to remove any more: an ordinary file will do


def test_an_empty_file_at_start_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WebConfigError, match="has no settings"):
        load_web_config(write_web_config(tmp_path, "# nothing yet\n"))


def test_no_prefix_of_a_protected_file_loads_without_its_users(tmp_path: Path) -> None:
    """What an editor's truncate-then-write may leave for a reload to see, cut at every byte:
    each either fails or keeps some users."""
    path = Path(write_web_config(tmp_path, PROTECTED))
    reloads = _Reloads(str(path))
    data = PROTECTED.encode()
    loaded = 0
    for cut in range(len(data)):
        path.write_bytes(data[:cut])
        if reloads.reload():
            loaded += 1
            assert reloads.watcher.current.users, data[:cut]
    assert loaded > 0  # some prefixes are whole files with fewer users: those are fine


def test_no_prefix_of_a_client_certificate_file_checks_less(
        tmp_path: Path, ca: Authority) -> None:
    server = ca.issue("server", "exporter")
    text = (f"tls_server_config:\n  cert_file: {server.cert}\n  key_file: {server.key}\n"
            f"  client_ca_file: {ca.files.cert}\n"
            "  client_auth_type: RequireAndVerifyClientCert\n"
            "  client_allowed_sans:\n  - prometheus\n  - vmagent\n")
    path = Path(write_web_config(tmp_path, text))
    reloads = _Reloads(str(path))
    data = text.encode()
    for cut in range(len(data)):
        path.write_bytes(data[:cut])
        if reloads.reload():
            tls = reloads.watcher.current.tls
            assert tls is not None
            assert tls.client_auth == "RequireAndVerifyClientCert", data[:cut]
            assert tls.client_allowed_sans, data[:cut]
    # Without the SAN list but still taking certificates: refused (any certificate would do).
    path.write_text(text.replace("  client_allowed_sans:\n  - prometheus\n  - vmagent\n", ""),
                    encoding="utf-8")
    assert not reloads.reload()
    assert reloads.watcher.current.tls is not None
    assert reloads.watcher.current.tls.client_allowed_sans
    # Said explicitly, client certificates are dropped.
    path.write_text(f"tls_server_config:\n  cert_file: {server.cert}\n  key_file: {server.key}\n"
                    "  client_auth_type: NoClientCert\n", encoding="utf-8")
    assert reloads.reload()
    assert reloads.watcher.current.tls is not None
    assert reloads.watcher.current.tls.client_auth == "NoClientCert"
