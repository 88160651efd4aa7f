"""The web config in force, re-read when its file or a certificate file changes.

``WebConfigWatcher`` holds the parsed config (``exporter.web.webconfig``) and its one SSL
context; a changed file, a rotated certificate or a SIGHUP is loaded into that same context
between requests, so new handshakes use it without a restart.

A reload fails closed: the file is read once, and a file that cannot be read, is empty or
only comments, is invalid, or drops an authentication without saying so explicitly (an
editor's truncate-then-write, a copy caught half-way) leaves the last good config in force,
with one error line and ``gpu_exporter_web_config_last_reload_successful`` at 0.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from exporter.web.webconfig import (
    NO_CLIENT_CERT,
    REQUIRE_AND_VERIFY,
    REQUIRE_ANY,
    VERIFY_IF_GIVEN,
    TlsConfig,
    WebConfig,
    WebConfigError,
    build_ssl_context,
    configure_context,
    load_certificate,
    parse_web_config,
    read_web_config,
)

__all__ = ["WebConfigWatcher", "authentication_dropped"]

log = logging.getLogger(__name__)

_Signature = tuple[tuple[str, int, int, int], ...]
#: The client-certificate policies that require a certificate, and those that verify its chain:
#: a reload that leaves either set checks less (the two are not one scale).
_REQUIRES_CERTIFICATE = frozenset({REQUIRE_ANY, REQUIRE_AND_VERIFY})
_VERIFIES_CERTIFICATE = frozenset({VERIFY_IF_GIVEN, REQUIRE_AND_VERIFY})


def _checks_less(old: TlsConfig, new: TlsConfig) -> bool:
    return any(old.client_auth in kind and new.client_auth not in kind
               for kind in (_REQUIRES_CERTIFICATE, _VERIFIES_CERTIFICATE))


def _signature(paths: tuple[str, ...]) -> _Signature:
    out = []
    for path in paths:
        try:
            st = os.stat(path)  # follows symlinks: a Kubernetes Secret swaps ..data
            out.append((path, st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append((path, -1, -1, -1))
    return tuple(out)


def authentication_dropped(old: WebConfig, new: WebConfig, data: Mapping[str, Any]) -> str | None:
    """Why ``new`` may not replace ``old``: it checks less than ``old`` and its file
    (``data``, the top-level mapping) does not say so explicitly; None when it may.

    Any prefix of a valid file can parse as a valid file with fewer settings (the
    ``basic_auth_users:`` line without its users), so a weaker config must name what it
    removes: ``basic_auth_users: {}``, an explicit ``client_auth_type``. No prefix of a file
    yields those unless the file has them. The format has no explicit "any SAN" (an empty
    ``client_allowed_sans`` refuses every client, as in Go), so dropping the SAN list under the
    same ``client_auth_type`` needs a restart; a file that names another policy may drop it.
    """
    if old.users and not new.users and data.get("basic_auth_users") != {}:
        return ("basic_auth_users: the file has no users now; authentication is only "
                "removed by an explicit 'basic_auth_users: {}'")
    if old.tls is None or new.tls is None:
        return None  # TLS on or off: refused by the watcher (a restart)
    tls = data.get("tls_server_config") or {}
    if _checks_less(old.tls, new.tls) and "client_auth_type" not in tls:
        return ("tls_server_config: the file checks client certificates less now; that "
                "takes an explicit client_auth_type")
    if (old.tls.client_allowed_sans and not new.tls.client_allowed_sans
            and new.tls.client_auth == old.tls.client_auth != NO_CLIENT_CERT):
        return ("tls_server_config.client_allowed_sans: the file has none now; any certificate "
                "would be accepted, so removing the list takes a restart (or another "
                "client_auth_type)")
    return None


class WebConfigWatcher:
    """The live web config: re-read when the file or a certificate file changes.

    ``ssl_context`` is created once and handed to the server; a rotated certificate (or a
    changed client CA, version range or cipher list) is loaded into that same context, so
    new handshakes use it with no restart. A reload that fails (see the module docstring)
    is logged and the last good config kept. Switching TLS on or off needs a restart (the
    listener is fixed). Checks are throttled to one ``stat`` round per ``check_interval``
    seconds; call ``maybe_reload`` as connections and requests arrive (all on the event
    loop thread). ``request_reload`` (SIGHUP) makes the next call re-read the files whether
    they changed or not. Every reload attempt calls ``on_reload`` with its outcome (the CLI
    serves it as ``gpu_exporter_web_config_last_reload_successful`` and counts failures in
    ``gpu_exporter_errors_total{kind="web_config"}``).
    """

    def __init__(self, path: str | None, *, check_interval: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """Load ``path`` (None: plain HTTP, no auth, nothing to watch).

        Raises:
            WebConfigError: the file is unreadable, empty or invalid.
        """
        self._clock = clock
        self._signature: _Signature = ()
        if path:
            self._signature = _signature((path,))
            document = read_web_config(path)
            self.current = parse_web_config(document.data, path, document.warnings)
            self._signature = self._extend_signature(self.current)
        else:
            self.current = WebConfig()
        self.ssl_context = build_ssl_context(self.current.tls) if self.current.tls else None
        if self.ssl_context is not None:
            self.ssl_context.set_alpn_protocols(["http/1.1"])
        self.reloads = 0
        self.reload_failures = 0
        self.last_reload_successful = True
        self.on_reload: Callable[[bool], object] | None = None
        self._check_interval = check_interval
        self._next_check = clock() + check_interval
        self._forced = False

    def _watched(self, config: WebConfig) -> tuple[str, ...]:
        if config.path is None:
            return ()
        return (config.path, *(config.tls.files() if config.tls else ()))

    def _extend_signature(self, config: WebConfig) -> _Signature:
        """The stored signature, for ``config``'s files: entries taken before the read are
        kept (a change during or after the read shows at the next check); files the config
        names anew are stat'ed now."""
        known = {entry[0]: entry for entry in self._signature}
        paths = self._watched(config)
        fresh = {entry[0]: entry for entry in _signature(tuple(p for p in paths if p not in known))}
        return tuple(known.get(p) or fresh[p] for p in paths)

    def request_reload(self) -> None:
        """Re-read the files at the next ``maybe_reload``, changed or not (safe in a signal
        handler: two assignments)."""
        self._forced = True
        self._next_check = float("-inf")

    def maybe_reload(self) -> bool:
        """Re-read the config if a watched file changed (or a reload was requested); True
        when a new config is live."""
        path = self.current.path
        if path is None:
            return False
        now = self._clock()
        if now < self._next_check:
            return False
        self._next_check = now + self._check_interval
        forced, self._forced = self._forced, False
        signature = _signature(self._watched(self.current))
        if signature == self._signature and not forced:
            return False
        self._signature = signature  # taken before the read: a later change is seen
        try:
            document = read_web_config(path)  # the one read of this reload
            config = parse_web_config(document.data, path, document.warnings)
            refusal = authentication_dropped(self.current, config, document.data)
            if refusal is not None:
                raise WebConfigError(refusal)
            if (config.tls is None) != (self.current.tls is None):
                raise WebConfigError("turning TLS on or off needs a restart")
            if config.tls is not None:
                self._apply_tls(config.tls)
        except WebConfigError as exc:
            self.reload_failures += 1
            self.last_reload_successful = False
            log.error("web config not reloaded, the previous one stays in force: %s", exc)
            if self.on_reload is not None:
                self.on_reload(False)
            return False
        self.current = config
        self._signature = self._extend_signature(config)  # it may name other files
        self.reloads += 1
        self.last_reload_successful = True
        if self.on_reload is not None:
            self.on_reload(True)
        log.info("web config reloaded from %s", config.path)
        for warning in config.warnings:
            log.warning("web config: %s", warning)
        return True

    def _apply_tls(self, tls: TlsConfig) -> None:
        context = self.ssl_context
        assert context is not None
        build_ssl_context(tls)  # validate everything on a scratch context first
        load_certificate(context, tls)
        configure_context(context, tls)
