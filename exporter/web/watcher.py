"""The web config in force, re-read when its file or a certificate file changes.

``WebConfigWatcher`` holds the parsed config (``exporter.web.webconfig``) and its one SSL
context; a changed file, a rotated certificate or a SIGHUP is loaded into that same context
between requests, so new handshakes use it without a restart.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from exporter.web.webconfig import (
    TlsConfig,
    WebConfig,
    WebConfigError,
    build_ssl_context,
    configure_context,
    load_certificate,
    load_web_config,
)

__all__ = ["WebConfigWatcher"]

log = logging.getLogger(__name__)

_Signature = tuple[tuple[str, int, int, int], ...]


def _signature(paths: tuple[str, ...]) -> _Signature:
    out = []
    for path in paths:
        try:
            st = os.stat(path)  # follows symlinks: a Kubernetes Secret swaps ..data
            out.append((path, st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append((path, -1, -1, -1))
    return tuple(out)


class WebConfigWatcher:
    """The live web config: re-read when the file or a certificate file changes.

    ``ssl_context`` is created once and handed to the server; a rotated certificate (or a
    changed client CA, version range or cipher list) is loaded into that same context, so
    new handshakes use it with no restart. A file that became invalid is logged and the
    last good config kept. Switching TLS on or off needs a restart (the listener is fixed).
    Checks are throttled to one ``stat`` round per ``check_interval`` seconds; call
    ``maybe_reload`` as connections and requests arrive (all on the event loop thread).
    ``request_reload`` (SIGHUP) makes the next call re-read the files whether they changed or
    not. A failed reload calls ``on_error`` (the CLI counts it in
    ``gpu_exporter_errors_total{kind="web_config"}``).
    """

    def __init__(self, path: str | None, *, check_interval: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """Load ``path`` (None: plain HTTP, no auth, nothing to watch).

        Raises:
            WebConfigError: the file is invalid.
        """
        self.current = load_web_config(path) if path else WebConfig()
        self.ssl_context = build_ssl_context(self.current.tls) if self.current.tls else None
        if self.ssl_context is not None:
            self.ssl_context.set_alpn_protocols(["http/1.1"])
        self.reloads = 0
        self.reload_failures = 0
        self.on_error: Callable[[], object] | None = None
        self._check_interval = check_interval
        self._clock = clock
        self._next_check = clock() + check_interval
        self._forced = False
        self._signature = self._watch_signature()

    def _watch_signature(self) -> _Signature:
        config = self.current
        if config.path is None:
            return ()
        return _signature((config.path, *(config.tls.files() if config.tls else ())))

    def request_reload(self) -> None:
        """Re-read the files at the next ``maybe_reload``, changed or not (safe in a signal
        handler: two assignments)."""
        self._forced = True
        self._next_check = float("-inf")

    def maybe_reload(self) -> bool:
        """Re-read the config if a watched file changed (or a reload was requested); True
        when a new config is live."""
        if self.current.path is None:
            return False
        now = self._clock()
        if now < self._next_check:
            return False
        self._next_check = now + self._check_interval
        forced, self._forced = self._forced, False
        signature = self._watch_signature()
        if signature == self._signature and not forced:
            return False
        self._signature = signature
        try:
            config = load_web_config(self.current.path)
            if (config.tls is None) != (self.current.tls is None):
                raise WebConfigError("turning TLS on or off needs a restart")
            if config.tls is not None:
                self._apply_tls(config.tls)
        except WebConfigError as exc:
            self.reload_failures += 1
            log.error("web config not reloaded, the previous one stays in force: %s", exc)
            if self.on_error is not None:
                self.on_error()
            return False
        self.current = config
        self._signature = self._watch_signature()  # the new config may name other files
        self.reloads += 1
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
