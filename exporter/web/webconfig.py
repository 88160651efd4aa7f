"""``--web.config.file``: the Prometheus exporter-toolkit web configuration format.

The same YAML every Go exporter accepts (``tls_server_config``, ``http_server_config``,
``basic_auth_users``, ``rate_limit``), parsed strictly: an unknown key, a password that is not
a bcrypt hash, or a certificate/key that cannot be loaded is a ``WebConfigError`` with one
line naming the key. Relative file names are relative to the web config file's directory
(as in exporter-toolkit).

One key is ours: ``unauthenticated_paths`` (a list, at most ``/healthz`` and ``/readyz``)
leaves those probe endpoints open when ``basic_auth_users`` is set, for kubelet probes.

Every file (the config, certificates, keys, CAs) is read through ``exporter.files``: a FIFO,
device, directory or oversized file is refused with one line, never opened for a blocking read,
and OpenSSL only ever reads private temporary copies. Settings that weaken security (a file
that other users may write, TLS versions below 1.2) are accepted with a warning
(``WebConfig.warnings``, logged at every load).

Unsupported toolkit features are refused, never silently ignored: ``client_auth_type``
``RequestClientCert``/``RequireAnyClientCert`` (Python's ssl cannot ask for a certificate
without verifying it) and ``curve_preferences`` (Python < 3.13 sets one curve only).
``http2`` is accepted and has no effect: the server speaks HTTP/1.1.
"""

from __future__ import annotations

import hashlib
import os
import re
import ssl
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.files import describe, read_file_stat
from exporter.values import check_range, parse_duration

__all__ = [
    "OPENABLE_PATHS",
    "RateLimit",
    "TlsConfig",
    "WebConfig",
    "WebConfigDocument",
    "WebConfigError",
    "build_ssl_context",
    "load_certificate",
    "load_web_config",
    "read_web_config",
]


class WebConfigError(ValueError):
    """The web config file is unusable (one line naming the key and the problem)."""


#: Paths ``unauthenticated_paths`` may open: probes that reveal nothing about processes.
OPENABLE_PATHS: frozenset[str] = frozenset({"/healthz", "/readyz"})

_TLS_VERSIONS: dict[str, ssl.TLSVersion] = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH: dict[str, ssl.VerifyMode | None] = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
    "RequestClientCert": None,  # None: a Go mode Python's ssl cannot express
    "RequireAnyClientCert": None,
}
#: Go's cipher suite names (crypto/tls.CipherSuites) -> OpenSSL's; TLS 1.3 suites are not
#: configurable in Go either, so their names are accepted and map to nothing.
_CIPHERS: dict[str, str | None] = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
}
#: Headers http_server_config.headers may set (exporter-toolkit's list).
_HEADERS = ("Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options",
            "X-XSS-Protection", "Strict-Transport-Security")
#: Largest web config file, and largest certificate, key or CA file, read.
MAX_CONFIG_BYTES = 1 << 20
MAX_PEM_BYTES = 1 << 20
#: Versions below TLS 1.2 (deprecated by RFC 8996): accepted with a warning.
_WEAK_VERSIONS = frozenset({ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1})
#: $2a$/$2b$/$2y$, two-digit cost, 53 characters of salt and hash.
_BCRYPT = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """``tls_server_config``, with file names made absolute and PEM text read."""

    cert_file: str | None
    key_file: str | None
    cert_pem: str  # inline ``cert``, or the text of ``cert_file``
    key_pem: str  # inline ``key``, or the text of ``key_file``
    client_ca_file: str | None
    client_ca_pem: str | None  # inline ``client_ca``, or the text of ``client_ca_file``
    verify_mode: ssl.VerifyMode
    client_allowed_sans: frozenset[str]
    min_version: ssl.TLSVersion
    max_version: ssl.TLSVersion
    ciphers: tuple[str, ...]  # OpenSSL names, TLS <= 1.2
    prefer_server_ciphers: bool

    def files(self) -> tuple[str, ...]:
        """The files this config reads (watched for changes)."""
        return tuple(f for f in (self.cert_file, self.key_file, self.client_ca_file) if f)


@dataclass(frozen=True, slots=True)
class RateLimit:
    """``rate_limit``: a token bucket over all requests (``interval`` between tokens)."""

    interval_seconds: float
    burst: int


@dataclass(frozen=True, slots=True)
class WebConfig:
    """A parsed web config file. The empty config (no file) serves plain HTTP, no auth."""

    path: str | None = None
    tls: TlsConfig | None = None
    users: Mapping[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash
    headers: tuple[tuple[str, str], ...] = ()
    rate_limit: RateLimit | None = None
    unauthenticated_paths: frozenset[str] = frozenset()
    warnings: tuple[str, ...] = ()  # settings that weaken security, logged at every load

    @property
    def fingerprint(self) -> str:
        """Changes whenever the users change (keys the verified-credentials cache)."""
        digest = hashlib.sha256()
        for user, hashed in sorted(self.users.items()):
            digest.update(user.encode() + b"\0" + hashed + b"\0")
        return digest.hexdigest()


# --- strict field readers --------------------------------------------------------------------


def _mapping(value: Any, where: str, allowed: tuple[str, ...] | None) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WebConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise WebConfigError(f"{where}: key {key!r} is not a string")
        if allowed is not None and key not in allowed:
            raise WebConfigError(f"{where}: unknown key {key!r} (known: {', '.join(allowed)})")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise WebConfigError(f"{where}: expected a non-empty string")
    return value


def _strings(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise WebConfigError(f"{where}: expected a list of strings")
    return [_string(item, f"{where}[{i}]") for i, item in enumerate(value)]


def _bool(value: Any, where: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise WebConfigError(f"{where}: expected true or false")
    return value


def _writable_by_others(info: os.stat_result) -> bool:
    return bool(info.st_mode & stat.S_IWOTH)


def _pem_file(path: str, where: str, warnings: list[str]) -> str:
    """The text of a certificate, key or CA file (bounded, regular files only)."""
    try:
        data, info = read_file_stat(path, MAX_PEM_BYTES)
        text = data.decode("ascii")
    except OSError as exc:
        raise WebConfigError(f"{where}: cannot read {path}: {describe(exc)}") from None
    except UnicodeDecodeError:
        raise WebConfigError(f"{where}: {path} is not PEM text") from None
    if _writable_by_others(info):
        warnings.append(f"{where}: {path} is writable by every user (chmod o-w it)")
    return text


def _tls(raw: Any, base: Path, warnings: list[str]) -> TlsConfig:
    where = "tls_server_config"
    tls = _mapping(raw, where, (
        "cert_file", "key_file", "cert", "key", "client_ca_file", "client_ca",
        "client_auth_type", "client_allowed_sans", "min_version", "max_version",
        "cipher_suites", "prefer_server_cipher_suites", "curve_preferences"))

    def file(key: str) -> str | None:
        if tls.get(key) is None:
            return None
        return str(base / _string(tls[key], f"{where}.{key}"))

    def pem(key: str) -> str | None:
        inline, path = tls.get(key), file(f"{key}_file")
        if inline is not None and path is not None:
            raise WebConfigError(f"{where}: set {key} or {key}_file, not both")
        if path is not None:
            return _pem_file(path, f"{where}.{key}_file", warnings)
        return _string(inline, f"{where}.{key}") if inline is not None else None

    cert_file, key_file, ca_file = file("cert_file"), file("key_file"), file("client_ca_file")
    cert_pem, key_pem, ca_pem = pem("cert"), pem("key"), pem("client_ca")
    if cert_pem is None or key_pem is None:
        raise WebConfigError(f"{where}: needs cert_file (or cert) and key_file (or key)")

    auth_name = tls.get("client_auth_type")
    has_ca = (ca_file or ca_pem) is not None
    if auth_name is None:
        auth_name = "RequireAndVerifyClientCert" if has_ca else "NoClientCert"
    auth_name = _string(auth_name, f"{where}.client_auth_type")
    if auth_name not in _CLIENT_AUTH:
        raise WebConfigError(f"{where}.client_auth_type: unknown value {auth_name!r} "
                             f"(known: {', '.join(_CLIENT_AUTH)})")
    verify = _CLIENT_AUTH[auth_name]
    if verify is None:
        raise WebConfigError(f"{where}.client_auth_type: {auth_name} is not supported (a client "
                             "certificate is only accepted when verified); use "
                             "RequireAndVerifyClientCert or VerifyClientCertIfGiven")
    if verify is not ssl.CERT_NONE and not has_ca:
        raise WebConfigError(f"{where}.client_auth_type: {auth_name} needs client_ca_file")
    if verify is ssl.CERT_NONE and has_ca:
        raise WebConfigError(f"{where}: client_ca_file is set but client_auth_type is "
                             "NoClientCert")
    sans = frozenset(_strings(tls.get("client_allowed_sans"), f"{where}.client_allowed_sans"))
    if sans and verify is not ssl.CERT_REQUIRED:
        raise WebConfigError(f"{where}.client_allowed_sans needs client_auth_type "
                             "RequireAndVerifyClientCert")

    def version(key: str, default: str) -> ssl.TLSVersion:
        name = _string(tls.get(key, default), f"{where}.{key}")
        if name not in _TLS_VERSIONS:
            raise WebConfigError(f"{where}.{key}: unknown version {name!r} "
                                 f"(known: {', '.join(_TLS_VERSIONS)})")
        return _TLS_VERSIONS[name]

    low, high = version("min_version", "TLS12"), version("max_version", "TLS13")
    if low > high:
        raise WebConfigError(f"{where}: min_version is above max_version")
    if low in _WEAK_VERSIONS:
        warnings.append(f"{where}.min_version: {tls['min_version']} allows TLS versions "
                        "below 1.2, deprecated by RFC 8996 (use TLS12; OpenSSL may refuse "
                        "them anyway)")
    ciphers: list[str] = []
    for i, name in enumerate(_strings(tls.get("cipher_suites"), f"{where}.cipher_suites")):
        if name not in _CIPHERS:
            raise WebConfigError(f"{where}.cipher_suites[{i}]: unknown or insecure suite "
                                 f"{name!r}")
        openssl_name = _CIPHERS[name]
        if openssl_name is not None:
            ciphers.append(openssl_name)
    if tls.get("curve_preferences") is not None:
        raise WebConfigError(f"{where}.curve_preferences is not supported; remove it (OpenSSL's "
                             "default groups are used)")
    return TlsConfig(
        cert_file=cert_file, key_file=key_file, cert_pem=cert_pem, key_pem=key_pem,
        client_ca_file=ca_file, client_ca_pem=ca_pem, verify_mode=verify,
        client_allowed_sans=sans, min_version=low, max_version=high, ciphers=tuple(ciphers),
        prefer_server_ciphers=_bool(tls.get("prefer_server_cipher_suites"),
                                    f"{where}.prefer_server_cipher_suites", True),
    )


def _users(raw: Any) -> dict[str, bytes]:
    users: dict[str, bytes] = {}
    for name, hashed in _mapping(raw, "basic_auth_users", None).items():
        where = f"basic_auth_users.{name}"
        if not name or ":" in name or not name.isprintable():
            raise WebConfigError(f"{where}: a user name must be printable, without ':'")
        if not isinstance(hashed, str) or not _BCRYPT.fullmatch(hashed):
            raise WebConfigError(f"{where}: not a bcrypt hash (plaintext passwords are refused; "
                                 "make one with: htpasswd -nBC 10 \"\" | tr -d ':\\n')")
        cost = int(_BCRYPT.fullmatch(hashed).group(1))  # type: ignore[union-attr]
        if not 4 <= cost <= 31:
            raise WebConfigError(f"{where}: bcrypt cost {cost} is outside 4..31")
        users[name] = hashed.encode("ascii")
    return users


def _headers(raw: Any) -> tuple[tuple[str, str], ...]:
    out = []
    for name, value in _mapping(raw, "http_server_config.headers", _HEADERS).items():
        where = f"http_server_config.headers.{name}"
        if not isinstance(value, str):
            raise WebConfigError(f"{where}: expected a string")
        if not value:
            continue  # blank: unset, as in exporter-toolkit
        if any(c in value for c in "\r\n\0") or not value.isascii():
            raise WebConfigError(f"{where}: the value must be one line of ASCII")
        out.append((name, value))
    return tuple(out)


def _rate_limit(raw: Any) -> RateLimit | None:
    limit = _mapping(raw, "rate_limit", ("interval", "burst"))
    if not limit:
        return None
    text = limit.get("interval", "0")
    text = text if isinstance(text, str) else str(text)
    try:
        seconds = check_range("rate_limit.interval", parse_duration(text), text)
    except ValueError as exc:
        raise WebConfigError(f"rate_limit.interval: {exc}") from None
    burst = limit.get("burst", 1)
    try:
        if isinstance(burst, bool) or not isinstance(burst, int):
            raise ValueError(f"{burst!r} is not an integer")
        check_range("rate_limit.burst", burst)
    except ValueError as exc:
        raise WebConfigError(f"rate_limit.burst: {exc}") from None
    return None if seconds == 0 else RateLimit(interval_seconds=seconds, burst=burst)


def parse_web_config(data: Any, path: str, warnings: tuple[str, ...] = ()) -> WebConfig:
    """Validate parsed YAML (``path`` anchors relative file names; ``warnings`` found so far
    about the file itself are kept with those found here).

    Raises:
        WebConfigError: the first problem found.
    """
    found = list(warnings)
    top = _mapping(data, "web config", (
        "tls_server_config", "http_server_config", "basic_auth_users", "rate_limit",
        "unauthenticated_paths"))
    base = Path(path).resolve().parent
    tls = _tls(top["tls_server_config"], base, found) if top.get("tls_server_config") else None
    http = _mapping(top.get("http_server_config"), "http_server_config", ("http2", "headers"))
    _bool(http.get("http2"), "http_server_config.http2", True)
    users = _users(top.get("basic_auth_users"))
    open_paths = frozenset(_strings(top.get("unauthenticated_paths"), "unauthenticated_paths"))
    if not open_paths <= OPENABLE_PATHS:
        bad = ", ".join(sorted(open_paths - OPENABLE_PATHS))
        raise WebConfigError(f"unauthenticated_paths: {bad} cannot be opened (only "
                             f"{', '.join(sorted(OPENABLE_PATHS))})")
    config = WebConfig(
        path=path, tls=tls, users=users, headers=_headers(http.get("headers")),
        rate_limit=_rate_limit(top.get("rate_limit")), unauthenticated_paths=open_paths,
        warnings=tuple(found),
    )
    if tls is not None:
        build_ssl_context(tls)  # loads the certificate and key: a bad pair fails here
    return config


@dataclass(frozen=True, slots=True)
class WebConfigDocument:
    """One read of the web config file: its top-level mapping and the file's ``fstat`` then."""

    data: dict[str, Any]
    info: os.stat_result
    warnings: tuple[str, ...]  # about the file itself (its mode)


def read_web_config(path: str) -> WebConfigDocument:
    """Read the file at ``path`` once and parse its YAML (not validated yet).

    A document with no settings (an empty file, only comments, a lone ``null``) is refused:
    a file caught half-written, or truncated by an editor, must never read as "no
    authentication". ``{}`` is the explicit config with no settings.

    Raises:
        WebConfigError: unreadable, not YAML, or empty.
    """
    try:
        raw, info = read_file_stat(path, MAX_CONFIG_BYTES)
    except OSError as exc:
        raise WebConfigError(f"cannot read {path}: {describe(exc)}") from None
    # YAML loads only when a web config file is given (resident memory of the default setup).
    from exporter.boundedyaml import YamlLimitError, load_bounded  # noqa: PLC0415

    try:
        text = raw.decode("utf-8")
        data = load_bounded(text, max_bytes=MAX_CONFIG_BYTES, max_depth=8, max_nodes=10_000)
    except UnicodeDecodeError:
        raise WebConfigError(f"{path}: not UTF-8 text") from None
    except YamlLimitError as exc:
        raise WebConfigError(f"{path}: {exc}") from None
    if data is None:
        raise WebConfigError(f"{path} has no settings (empty, or only comments); write {{}} "
                             "for a web config with none")
    warnings = ((f"{path} is writable by every user, who can then turn authentication off "
                 "(chmod o-w it)",) if _writable_by_others(info) else ())
    return WebConfigDocument(_mapping(data, "web config", None), info, warnings)


def load_web_config(path: str) -> WebConfig:
    """Read and validate the file at ``path``.

    Raises:
        WebConfigError: unreadable, not YAML, empty, or invalid (one line naming the key).
    """
    document = read_web_config(path)
    return parse_web_config(document.data, path, document.warnings)


# --- the SSL context -------------------------------------------------------------------------


def _load_pem_pair(context: ssl.SSLContext, cert: str, key: str) -> None:
    # load_cert_chain only takes paths: the PEM text (inline, or read by _pem_file, which
    # refuses FIFOs and devices) goes through private temporary files.
    with tempfile.TemporaryDirectory(prefix="gpu-exporter-tls-") as tmp:
        cert_path, key_path = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
        for target, text in ((cert_path, cert), (key_path, key)):
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
        context.load_cert_chain(cert_path, key_path)


def load_certificate(context: ssl.SSLContext, tls: TlsConfig) -> None:
    """Load ``tls``'s certificate and key into ``context`` (replacing any loaded before).

    Raises:
        WebConfigError: they cannot be loaded or do not match.
    """
    try:
        _load_pem_pair(context, tls.cert_pem, tls.key_pem)
    except (ssl.SSLError, OSError, UnicodeEncodeError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
        raise WebConfigError(f"tls_server_config: cannot load the certificate and key "
                             f"({reason})") from None


def build_ssl_context(tls: TlsConfig) -> ssl.SSLContext:
    """A server-side context for ``tls``.

    Raises:
        WebConfigError: a file cannot be loaded, or OpenSSL refuses a setting.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.minimum_version = tls.min_version
        context.maximum_version = tls.max_version
        if tls.ciphers:
            context.set_ciphers(":".join(tls.ciphers))
    except (ssl.SSLError, ValueError) as exc:
        raise WebConfigError(f"tls_server_config: OpenSSL refused the settings ({exc})") from None
    if not tls.prefer_server_ciphers:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    load_certificate(context, tls)
    context.verify_mode = tls.verify_mode
    if tls.verify_mode is not ssl.CERT_NONE:
        try:
            context.load_verify_locations(cadata=tls.client_ca_pem)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise WebConfigError(f"tls_server_config: cannot load the client CA "
                                 f"({getattr(exc, 'reason', None) or exc})") from None
    return context
