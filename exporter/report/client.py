"""A small Prometheus HTTP API client on the standard library (TLS, basic auth, bearer token).

Every failure becomes a ``ReportError`` whose message is one line a user can act on.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.report import answers
from exporter.report.answers import ReportError, RuleGroup, Sample

__all__ = ["Connection", "PrometheusClient", "ReportError", "Sample"]

#: Largest answer read (a week of per-process data is far below it): a wrong URL serving
#: something huge must not eat the memory.
MAX_BODY_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Connection:
    """How to reach Prometheus (the flags of ``gpu-exporter report``)."""

    url: str = "http://localhost:9090"
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    insecure_skip_verify: bool = False
    username: str | None = None
    password_file: Path | None = None
    bearer_token_file: Path | None = None
    timeout_seconds: float = 60.0


def _read_secret(path: Path, flag: str) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"{flag} {path}: cannot read it ({getattr(exc, 'strerror', exc)})"
        ) from None
    secret = text.strip("\r\n")
    if not secret:
        raise ReportError(f"{flag} {path}: the file is empty")
    return secret


def _ssl_context(conn: Connection) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(
            cafile=str(conn.ca_file) if conn.ca_file else None
        )
        if conn.cert_file is not None:
            context.load_cert_chain(str(conn.cert_file),
                                    str(conn.key_file) if conn.key_file else None)
    except (OSError, ssl.SSLError) as exc:
        which = "--prometheus.cert-file/--prometheus.key-file" if conn.cert_file else (
            "--prometheus.ca-file")
        raise ReportError(f"{which}: cannot load ({getattr(exc, 'strerror', None) or exc})"
        ) from None
    if conn.insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class PrometheusClient:
    """GETs and POSTs to Prometheus's ``/api/v1`` endpoints.

    Raises ``ReportError`` from every method (and from the constructor for unusable files).
    """

    def __init__(self, conn: Connection) -> None:
        parsed = urllib.parse.urlsplit(conn.url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ReportError(f"--prometheus.url {conn.url!r}: expected http(s)://host:port")
        if conn.key_file is not None and conn.cert_file is None:
            raise ReportError("--prometheus.key-file needs --prometheus.cert-file")
        if conn.password_file is not None and conn.username is None:
            raise ReportError("--prometheus.password-file needs --prometheus.username")
        if conn.username is not None and conn.bearer_token_file is not None:
            raise ReportError("use basic auth or a bearer token, not both")
        self.base = conn.url.rstrip("/")
        self.timeout = conn.timeout_seconds
        self._headers = {"Accept": "application/json", "User-Agent": "gpu-exporter-report"}
        if conn.username is not None:
            password = (_read_secret(conn.password_file, "--prometheus.password-file")
                        if conn.password_file else "")
            token = base64.b64encode(f"{conn.username}:{password}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"
        elif conn.bearer_token_file is not None:
            bearer = _read_secret(conn.bearer_token_file, "--prometheus.bearer-token-file")
            self._headers["Authorization"] = f"Bearer {bearer}"
        self._context = _ssl_context(conn) if parsed.scheme == "https" else None
        if parsed.scheme == "http" and (conn.ca_file or conn.cert_file):
            raise ReportError("TLS files given but --prometheus.url is http://; use https://")

    def _request(self, path: str, params: dict[str, str], post: bool) -> Any:
        body = urllib.parse.urlencode(params).encode() if post else None
        url = f"{self.base}{path}" + ("" if post else "?" + urllib.parse.urlencode(params))
        request = urllib.request.Request(url, data=body, headers=self._headers,
                                         method="POST" if post else "GET")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout,
                                        context=self._context) as response:
                raw = response.read(MAX_BODY_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc) from None
        except urllib.error.URLError as exc:
            raise self._unreachable(exc.reason) from None
        except TimeoutError:
            raise ReportError(
                f"Prometheus at {self.base} did not answer within {self.timeout:g} s "
                "(raise --prometheus.timeout or shorten the range)") from None
        except (ConnectionError, ssl.SSLError, OSError) as exc:
            raise self._unreachable(exc) from None
        if len(raw) > MAX_BODY_BYTES:
            raise ReportError(f"{self.base}{path}: answer larger than {MAX_BODY_BYTES} bytes")
        return self._decode(raw, path)

    def _decode(self, raw: bytes, path: str) -> Any:
        try:
            doc = json.loads(raw)
        except ValueError:
            raise ReportError(
                f"{self.base}{path} did not answer JSON: is --prometheus.url a Prometheus?"
            ) from None
        return answers.data_of(doc, path)

    def _unreachable(self, reason: object) -> ReportError:
        if isinstance(reason, ssl.SSLCertVerificationError):
            return ReportError(
                f"TLS: the certificate of {self.base} is not trusted ({reason.verify_message}); "
                "pass --prometheus.ca-file (or --prometheus.insecure-skip-verify)")
        if isinstance(reason, TimeoutError):
            return ReportError(f"Prometheus at {self.base} did not answer within "
                               f"{self.timeout:g} s")
        text = getattr(reason, "strerror", None) or str(reason)
        return ReportError(f"cannot reach Prometheus at {self.base}: {text}")

    def _http_error(self, exc: urllib.error.HTTPError) -> ReportError:
        if exc.code in (401, 403):
            return ReportError(
                f"Prometheus at {self.base} refused the request ({exc.code} {exc.reason}): "
                "check --prometheus.username/--prometheus.password-file or "
                "--prometheus.bearer-token-file")
        detail = ""
        try:
            doc = json.loads(exc.read(65536))
            detail = f": {doc.get('error')}" if isinstance(doc, dict) else ""
        except (ValueError, OSError):
            pass
        if exc.code == 404:
            return ReportError(f"{exc.url} answered 404: is --prometheus.url the Prometheus "
                               "base URL (including any path prefix)?")
        return ReportError(f"Prometheus answered {exc.code} {exc.reason}{detail}")

    def query(self, expr: str, at: float) -> list[Sample]:
        """An instant query at Unix time ``at``; scalars and vectors alike."""
        data = self._request("/api/v1/query", {"query": expr, "time": f"{at:.3f}"}, post=True)
        return answers.instant_samples(data, expr)

    def series_exist(self, match: str, start: float | None = None,
                     end: float | None = None) -> bool:
        """Whether any series matches (between ``start`` and ``end``, or at any time)."""
        params = {"match[]": match}
        if start is not None and end is not None:
            params.update(start=f"{start:.3f}", end=f"{end:.3f}")
        return bool(answers.series(self._request("/api/v1/series", params, post=False)))

    def rule_groups(self) -> list[RuleGroup]:
        """The recording rule groups this Prometheus evaluates (empty when it has none)."""
        return answers.rule_groups(self._request("/api/v1/rules", {"type": "record"},
                                                 post=False))
