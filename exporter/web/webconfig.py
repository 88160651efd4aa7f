"""``--web.config.file``: the Prometheus exporter-toolkit web configuration format.

The YAML every Go exporter built on exporter-toolkit accepts (``tls_server_config``,
``http_server_config``, ``basic_auth_users``, ``rate_limit``) with the meaning it has there:
a file node_exporter accepts is accepted, one it refuses at start is refused with one line
naming the key (``WebConfigError``). Where Go's rules are implicit they are followed too:
an empty string is an unset key, a YAML number where text is expected is its text
(``X-XSS-Protection: 1``), a bare number as ``rate_limit.interval`` is nanoseconds, an unset
``burst`` is 0. Relative file names are relative to the web config file's directory. What
this server does differently from Go's, key by key, is the compatibility table of
docs/security.md; a file that meets one of those differences gets one line at start
(``WebConfig.differences``).

One key is ours: ``unauthenticated_paths`` (a list, at most ``/healthz`` and ``/readyz``)
leaves those probe endpoints open when ``basic_auth_users`` is set, for kubelet probes.

Every file (the config, certificates, keys, CAs) is read through ``exporter.files``: a FIFO,
device, directory or oversized file is refused with one line, never opened for a blocking read,
and OpenSSL only ever reads private temporary copies. Settings that weaken security or that
surprise (a file that other users may write, TLS versions below 1.2, a rate limit that
refuses every request) are accepted with a warning (``WebConfig.warnings``, logged at every
load).

The same module turns ``tls_server_config`` into an ``SSLContext`` (``build_ssl_context``,
and ``configure_context`` for a reload into the live one); the two settings Python's ssl
cannot make itself (a client certificate asked for but not verified, a list of curves) go
through ``exporter.web.sslnative``.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import re
import ssl
import stat
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.files import describe, read_file_stat
from exporter.values import check_range

__all__ = [
    "OPENABLE_PATHS",
    "RateLimit",
    "TlsConfig",
    "WebConfig",
    "WebConfigDocument",
    "WebConfigError",
    "build_ssl_context",
    "configure_context",
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
#: Go's crypto/tls client authentication policies; exporter-toolkit still reads the old name
#: RequireClientCert as RequireAnyClientCert. An unset value is NoClientCert.
NO_CLIENT_CERT, REQUEST, REQUIRE_ANY = "NoClientCert", "RequestClientCert", "RequireAnyClientCert"
VERIFY_IF_GIVEN, REQUIRE_AND_VERIFY = "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"
_CLIENT_AUTH = (NO_CLIENT_CERT, REQUEST, REQUIRE_ANY, VERIFY_IF_GIVEN, REQUIRE_AND_VERIFY)
_CLIENT_AUTH_ALIASES = {"RequireClientCert": REQUIRE_ANY}
#: Go's cipher suite names (crypto/tls.CipherSuites(), the list exporter-toolkit accepts) ->
#: OpenSSL's, in Go's order of preference (the server picks by it, whatever the order in the
#: file: Go ignores that order and prefer_server_cipher_suites). TLS 1.3 suites are not
#: configurable in Go either: their names are accepted and change nothing.
_CIPHERS: dict[str, str | None] = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
}
#: Go's HTTP/2 server refuses to start unless a configured TLS 1.2 suite list has one of these.
_HTTP2_REQUIRED = ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                   "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256")
#: exporter-toolkit's curve names -> OpenSSL's group names.
_CURVES: dict[str, str] = {
    "CurveP256": "P-256",
    "CurveP384": "P-384",
    "CurveP521": "P-521",
    "X25519": "X25519",
    "X25519MLKEM768": "X25519MLKEM768",
}
#: OpenSSL's groups when none are configured (set again when a reload removes the key).
_DEFAULT_GROUPS = ("X25519", "P-256", "X448", "P-521", "P-384")
#: Headers http_server_config.headers may set (exporter-toolkit's list), with the values an
#: enumerated one may take (compared exactly, as there).
_HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}
#: What an HTTP header value may not hold (tab aside); CR and LF are made spaces before.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
#: Largest web config file, and largest certificate, key or CA file, read.
MAX_CONFIG_BYTES = 1 << 20
MAX_PEM_BYTES = 1 << 20
#: Versions below TLS 1.2 (deprecated by RFC 8996): accepted with a warning.
_WEAK_VERSIONS = frozenset({ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1})
#: $2a$/$2b$/$2y$, two-digit cost, 53 characters of salt and hash.
_BCRYPT = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")
#: Go's time.ParseDuration: signed, a sequence of decimal numbers with units.
_GO_DURATION = re.compile(r"(\d*\.?\d*)(ns|us|µs|μs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
             "h": 3600.0}


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """``tls_server_config``, with file names made absolute and PEM text read."""

    cert_file: str | None
    key_file: str | None
    cert_pem: str  # the text of ``cert_file``, or inline ``cert``
    key_pem: str  # the text of ``key_file``, or inline ``key``
    client_ca_file: str | None
    client_ca_pem: str | None  # the text of ``client_ca_file``, or inline ``client_ca``
    client_auth: str  # one of Go's policies (``_CLIENT_AUTH``)
    client_allowed_sans: frozenset[str]
    min_version: ssl.TLSVersion
    max_version: ssl.TLSVersion
    ciphers: tuple[str, ...]  # OpenSSL names, TLS <= 1.2, in Go's order of preference
    groups: tuple[str, ...]  # OpenSSL group names from curve_preferences (empty: defaults)

    def files(self) -> tuple[str, ...]:
        """The files this config reads (watched for changes)."""
        return tuple(f for f in (self.cert_file, self.key_file, self.client_ca_file) if f)


@dataclass(frozen=True, slots=True)
class RateLimit:
    """``rate_limit``: a token bucket over all requests, golang.org/x/time/rate's: ``burst``
    tokens at most, one more every ``interval_seconds``; ``burst`` <= 0 refuses everything."""

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
    warnings: tuple[str, ...] = ()  # logged at every load
    differences: tuple[str, ...] = ()  # what is served differently from Go exporters

    @property
    def fingerprint(self) -> str:
        """Changes whenever the users change (keys the verified-credentials cache)."""
        digest = hashlib.sha256()
        for user, hashed in sorted(self.users.items()):
            digest.update(user.encode() + b"\0" + hashed + b"\0")
        return digest.hexdigest()


# --- field readers: Go's yaml.v2 rules, strictly ----------------------------------------------


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


def _text(value: Any, where: str) -> str:
    """A string field: null is "", and a YAML number or boolean is its text (as Go reads it)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise WebConfigError(f"{where}: expected a string, got a {type(value).__name__}")


def _strings(value: Any, where: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise WebConfigError(f"{where}: expected a list of strings")
    return [_text(item, f"{where}[{i}]") for i, item in enumerate(value)]


def _bool(value: Any, where: str) -> bool:
    if value is None:
        return False  # null: Go's zero value
    if not isinstance(value, bool):
        raise WebConfigError(f"{where}: expected true or false")
    return value


def _go_integer(value: Any, where: str) -> int:
    """An int field: a YAML float is truncated, as Go's yaml.v2 does."""
    if value is None:
        return 0
    if isinstance(value, float) and math.isfinite(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise WebConfigError(f"{where}: {value!r} is not an integer")
    return value


def _go_duration(value: Any, where: str) -> float:
    """A time.Duration field, in seconds: a bare number is nanoseconds, text is Go's syntax
    ("1s", "1m30s", "500ms", "1.5h"; no days)."""
    if value is None:
        return 0.0
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _go_integer(value, where) / 1e9
    if not isinstance(value, str):
        raise WebConfigError(f"{where}: expected a duration such as 1s or 500ms")
    body = value[1:] if value[:1] in "+-" else value
    total, pos = 0.0, 0
    for match in _GO_DURATION.finditer(body):
        number = match.group(1)
        if match.start() != pos or not number.strip("."):
            break
        total += float(number if number[0] != "." else "0" + number) * _GO_UNITS[match.group(2)]
        pos = match.end()
    if body != "0" and (pos == 0 or pos != len(body)):
        raise WebConfigError(f"{where}: {value!r} is not a duration (Go's syntax: 500ms, 1s, "
                             "1m30s, 1h)")
    return -total if value.startswith("-") else total


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


# --- tls_server_config -------------------------------------------------------------------------


def _ciphers(names: list[str], where: str) -> tuple[str, ...]:
    """OpenSSL's names of Go's cipher suites ``names``, in Go's order of preference."""
    for i, name in enumerate(names):
        if name not in _CIPHERS:
            raise WebConfigError(f"{where}[{i}]: unknown cipher {name!r} (Go's crypto/tls "
                                 "names; insecure suites are not among them)")
    return tuple(o for go, o in _CIPHERS.items() if go in names and o is not None)


def _groups(curves: list[str], where: str, differences: list[str]) -> tuple[str, ...]:
    """OpenSSL's group names of the curves this OpenSSL knows (the others: ``differences``)."""
    groups: list[str] = []
    for i, name in enumerate(curves):
        if name not in _CURVES:
            raise WebConfigError(f"{where}[{i}]: unknown curve {name!r} "
                                 f"(known: {', '.join(_CURVES)})")
        if _group_known(_CURVES[name]):
            groups.append(_CURVES[name])
        else:
            differences.append(f"curve_preferences: {name} is not offered ({ssl.OPENSSL_VERSION} "
                               "does not know it)")
    if curves and not groups:
        raise WebConfigError(f"{where}: {ssl.OPENSSL_VERSION} knows none of {', '.join(curves)}")
    if groups and not _native_available():
        raise WebConfigError(f"{where} cannot be set: this Python's ssl module does not expose "
                             "OpenSSL's group list; remove the key")
    return tuple(dict.fromkeys(groups))


def _client_auth(tls: dict[str, Any], where: str, has_ca: bool) -> str:
    name = _text(tls.get("client_auth_type"), f"{where}.client_auth_type") or NO_CLIENT_CERT
    name = _CLIENT_AUTH_ALIASES.get(name, name)
    if name not in _CLIENT_AUTH:
        raise WebConfigError(f"{where}.client_auth_type: invalid ClientAuth {name!r} (known: "
                             f"{', '.join(_CLIENT_AUTH)})")
    if has_ca and name == NO_CLIENT_CERT:
        raise WebConfigError(f"{where}: client_ca_file (or client_ca) is set but "
                             "client_auth_type is NoClientCert, the default; set it")
    if name in (REQUEST, REQUIRE_ANY) and not _native_available():
        raise WebConfigError(f"{where}.client_auth_type: {name} cannot be served: this "
                             "Python's ssl module does not expose OpenSSL's verify callback")
    return name


def _tls(raw: Any, base: Path, warnings: list[str], differences: list[str],
         http2: bool) -> TlsConfig | None:
    """``tls_server_config``, or None where it turns TLS on by none of the keys Go's does."""
    where = "tls_server_config"
    tls = _mapping(raw, where, (
        "cert_file", "key_file", "cert", "key", "client_ca_file", "client_ca",
        "client_auth_type", "client_allowed_sans", "min_version", "max_version",
        "cipher_suites", "prefer_server_cipher_suites", "curve_preferences"))
    text = {key: _text(tls.get(key), f"{where}.{key}") for key in (
        "cert_file", "key_file", "cert", "key", "client_ca_file", "client_ca",
        "client_auth_type")}

    def version(key: str, default: str) -> ssl.TLSVersion:
        name = default if tls.get(key) is None else _text(tls[key], f"{where}.{key}")
        if name not in _TLS_VERSIONS:
            raise WebConfigError(f"{where}.{key}: unknown TLS version {name!r} "
                                 f"(known: {', '.join(_TLS_VERSIONS)})")
        return _TLS_VERSIONS[name]

    low, high = version("min_version", "TLS12"), version("max_version", "TLS13")
    named = _strings(tls.get("cipher_suites"), f"{where}.cipher_suites") or []
    ciphers = _ciphers(named, f"{where}.cipher_suites")
    groups = _groups(_strings(tls.get("curve_preferences"), f"{where}.curve_preferences") or [],
                     f"{where}.curve_preferences", differences)
    sans = _strings(tls.get("client_allowed_sans"), f"{where}.client_allowed_sans")
    _bool(tls.get("prefer_server_cipher_suites", True),
          f"{where}.prefer_server_cipher_suites")  # no effect, in Go neither
    if not any(text.values()):
        if tls:
            warnings.append(f"{where} names no certificate, key, CA or client_auth_type: TLS "
                            "is off (as in Go exporters)")
        return None
    if not (text["cert_file"] or text["cert"]):
        raise WebConfigError(f"{where}: missing one of cert or cert_file")
    if not (text["key_file"] or text["key"]):
        raise WebConfigError(f"{where}: missing one of key or key_file")
    has_ca = bool(text["client_ca_file"] or text["client_ca"])
    auth = _client_auth(tls, where, has_ca)
    if sans is not None:
        if auth not in (REQUIRE_ANY, REQUIRE_AND_VERIFY):
            raise WebConfigError(f"{where}.client_allowed_sans requires client_auth_type "
                                 f"{REQUIRE_ANY} or {REQUIRE_AND_VERIFY} (it is {auth})")
        if not sans:
            raise WebConfigError(f"{where}.client_allowed_sans is empty, which refuses every "
                                 "client; list the SANs allowed or remove the key")
    if low > high:
        raise WebConfigError(f"{where}: min_version is above max_version (no handshake "
                             "could succeed)")
    if low in _WEAK_VERSIONS:
        warnings.append(f"{where}.min_version: {tls['min_version']} allows TLS versions "
                        "below 1.2, deprecated by RFC 8996 (use TLS12; OpenSSL may refuse "
                        "them anyway)")
    # Go's net/http refuses to serve HTTP/2 (on by default) with a TLS 1.2 suite list that
    # HTTP/2 forbids; the same file is refused here, though this server speaks HTTP/1.1.
    if named and low < ssl.TLSVersion.TLSv1_3 and http2 and not set(named) & set(_HTTP2_REQUIRED):
        raise WebConfigError(f"{where}.cipher_suites is missing an HTTP/2-required "
                             f"AES_128_GCM_SHA256 cipher (need {' or '.join(_HTTP2_REQUIRED)}, as "
                             "in Go exporters), or set http_server_config.http2: false")

    def file(key: str) -> str | None:
        return str(base / text[key]) if text[key] else None

    def pem(key: str) -> str | None:
        path = file(f"{key}_file")
        if path is not None:
            if text[key]:
                warnings.append(f"{where}: both {key} and {key}_file are set; {key}_file is used")
            return _pem_file(path, f"{where}.{key}_file", warnings)
        return text[key] or None

    cert_pem, key_pem, ca_pem = pem("cert"), pem("key"), pem("client_ca")
    assert cert_pem is not None
    assert key_pem is not None
    return TlsConfig(
        cert_file=file("cert_file"), key_file=file("key_file"), cert_pem=cert_pem,
        key_pem=key_pem, client_ca_file=file("client_ca_file"), client_ca_pem=ca_pem,
        client_auth=auth, client_allowed_sans=frozenset(sans or ()), min_version=low,
        max_version=high, ciphers=ciphers, groups=groups,
    )


def _users(raw: Any) -> dict[str, bytes]:
    users: dict[str, bytes] = {}
    for name, hashed in _mapping(raw, "basic_auth_users", None).items():
        where = f"basic_auth_users.{name}"
        if not name or ":" in name or not name.isprintable():
            raise WebConfigError(f"{where}: a user name must be printable, without ':'")
        match = _BCRYPT.fullmatch(hashed) if isinstance(hashed, str) else None
        if match is None:
            raise WebConfigError(f"{where}: not a bcrypt hash (plaintext passwords are refused; "
                                 "make one with: htpasswd -nBC 10 \"\" | tr -d ':\\n')")
        if not 4 <= int(match.group(1)) <= 31:
            raise WebConfigError(f"{where}: bcrypt cost {match.group(1)} is outside 4..31")
        users[name] = hashed.encode("ascii")
    return users


def _headers(raw: Any) -> tuple[tuple[str, str], ...]:
    out = []
    for name, value in _mapping(raw, "http_server_config.headers", None).items():
        where = f"http_server_config.headers.{name}"
        if name not in _HEADERS:
            raise WebConfigError(f"http_server_config.headers: HTTP header {name!r} can not be "
                                 f"configured (only {', '.join(_HEADERS)})")
        text, allowed = _text(value, where), _HEADERS[name]
        if allowed and text not in allowed:
            raise WebConfigError(f"{where}: invalid value {text!r} (expected one of: "
                                 f"{', '.join(allowed)})")
        text = text.replace("\r", " ").replace("\n", " ")  # as Go's net/http writes it
        if not text:
            continue  # an empty header says nothing: not sent
        if _CONTROL.search(text):
            raise WebConfigError(f"{where}: the value has a control character")
        out.append((name, text))
    return tuple(out)


def _rate_limit(raw: Any, warnings: list[str]) -> RateLimit | None:
    limit = _mapping(raw, "rate_limit", ("interval", "burst"))
    seconds = _go_duration(limit.get("interval"), "rate_limit.interval")
    burst = _go_integer(limit.get("burst"), "rate_limit.burst")
    for key, value, text in (("interval", seconds, limit.get("interval")),
                             ("burst", burst, limit.get("burst"))):
        try:
            check_range(f"rate_limit.{key}", value, str(text))
        except ValueError as exc:
            raise WebConfigError(f"rate_limit.{key}: {exc}") from None
    if seconds <= 0:
        if seconds < 0:
            warnings.append("rate_limit.interval is negative: no rate limit (as in Go exporters)")
        return None
    if burst <= 0:
        warnings.append(f"rate_limit.burst is {burst}{' (unset)' if 'burst' not in limit else ''}:"
                        " every request is refused with 429, as in Go exporters; set it to 1 or "
                        "more")
    return RateLimit(interval_seconds=seconds, burst=burst)


def parse_web_config(data: Any, path: str, warnings: tuple[str, ...] = ()) -> WebConfig:
    """Validate parsed YAML (``path`` anchors relative file names; ``warnings`` found so far
    about the file itself are kept with those found here).

    Raises:
        WebConfigError: the first problem found.
    """
    found, differences = list(warnings), list[str]()
    top = _mapping(data, "web config", (
        "tls_server_config", "http_server_config", "basic_auth_users", "rate_limit",
        "unauthenticated_paths"))
    http = _mapping(top.get("http_server_config"), "http_server_config", ("http2", "headers"))
    http2 = _bool(http.get("http2", True), "http_server_config.http2")
    headers = _headers(http.get("headers"))
    users = _users(top.get("basic_auth_users"))
    rate_limit = _rate_limit(top.get("rate_limit"), found)
    tls = _tls(top.get("tls_server_config"), Path(path).resolve().parent, found, differences,
               http2)
    if tls is not None and http.get("http2") is True:
        differences.append("http_server_config.http2: HTTP/2 is not offered (HTTP/1.1 only)")
    open_paths = frozenset(_strings(top.get("unauthenticated_paths"), "unauthenticated_paths")
                           or ())
    if not open_paths <= OPENABLE_PATHS:
        bad = ", ".join(sorted(open_paths - OPENABLE_PATHS))
        raise WebConfigError(f"unauthenticated_paths: {bad} cannot be opened (only "
                             f"{', '.join(sorted(OPENABLE_PATHS))})")
    config = WebConfig(
        path=path, tls=tls, users=users, headers=headers, rate_limit=rate_limit,
        unauthenticated_paths=open_paths, warnings=tuple(found), differences=tuple(differences),
    )
    if tls is not None:
        build_ssl_context(tls)  # loads the certificate, key and CA: a bad one fails here
    return config


def _duplicate_key(text: str) -> str | None:
    """Where a mapping of ``text`` repeats a key (Go's strict YAML refuses it), or None."""
    import yaml  # noqa: PLC0415  (loaded only with a web config file, see load_web_config)

    stack = [yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))]
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in seen:
                        return f"line {key.start_mark.line + 1}: key {key.value!r} appears twice"
                    seen.add(key.value)
                stack.append(value)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return None


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
    duplicate = _duplicate_key(text)  # within the bounds just checked
    if duplicate is not None:
        raise WebConfigError(f"{path}: {duplicate}")
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


# --- the SSL context ---------------------------------------------------------------------------


def _native(action: Callable[[Any], None], where: str) -> None:
    """``action(sslnative)``; a failure is a WebConfigError naming ``where``."""
    from exporter.web import sslnative  # noqa: PLC0415  (ctypes, 0.3 MB: only for these keys)

    try:
        action(sslnative)
    except sslnative.SslNativeError as exc:
        raise WebConfigError(f"{where}: {exc}") from None


def _native_available() -> bool:
    from exporter.web import sslnative  # noqa: PLC0415  (see _native)

    return sslnative.available()


@functools.cache
def _group_known(name: str) -> bool:
    """Whether this OpenSSL offers the group ``name`` (tried on a scratch context)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        _native(lambda native: native.set_groups(context, [name]), "curve_preferences")
    except WebConfigError:
        return False
    return True


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


def configure_context(context: ssl.SSLContext, tls: TlsConfig) -> None:
    """Apply everything of ``tls`` but the certificate to ``context`` (a new one, or the live
    one on a reload): versions, ciphers, curves, client certificates.

    Client certificates, as Go's policies: VerifyClientCertIfGiven and
    RequireAndVerifyClientCert verify against ``client_ca`` or, without one, the system's
    roots; RequestClientCert and RequireAnyClientCert ask for one and never verify it. A CA
    removed from the file stays trusted until a restart (OpenSSL's trust store only grows).

    Raises:
        WebConfigError: OpenSSL refuses a setting or the client CA.
    """
    try:
        context.minimum_version = tls.min_version
        context.maximum_version = tls.max_version
        if tls.ciphers:
            context.set_ciphers(":".join(tls.ciphers))
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE  # Go's order (see _CIPHERS)
    except (ssl.SSLError, ValueError) as exc:
        raise WebConfigError(f"tls_server_config: OpenSSL refused the settings ({exc})") from None
    groups = tls.groups or (_DEFAULT_GROUPS if getattr(context, "_groups_set", False) else ())
    if groups:  # removed on a reload: OpenSSL's defaults again
        known = [g for g in groups if _group_known(g)]
        _native(lambda native: native.set_groups(context, known),
                "tls_server_config.curve_preferences")
        context._groups_set = bool(tls.groups)  # type: ignore[attr-defined]
    if tls.client_ca_pem is not None:
        try:
            context.load_verify_locations(cadata=tls.client_ca_pem)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise WebConfigError(f"tls_server_config: cannot load the client CA "
                                 f"({getattr(exc, 'reason', None) or exc})") from None
    if tls.client_auth in (REQUEST, REQUIRE_ANY):
        require = tls.client_auth == REQUIRE_ANY
        _native(lambda native: native.accept_any_client_certificate(context, require=require),
                "tls_server_config.client_auth_type")
        context._accepts_any = True  # type: ignore[attr-defined]
        return
    if tls.client_auth in (VERIFY_IF_GIVEN, REQUIRE_AND_VERIFY) and tls.client_ca_pem is None:
        context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    context.verify_mode = {NO_CLIENT_CERT: ssl.CERT_NONE, VERIFY_IF_GIVEN: ssl.CERT_OPTIONAL,
                           REQUIRE_AND_VERIFY: ssl.CERT_REQUIRED}[tls.client_auth]
    if getattr(context, "_accepts_any", False):  # a reload from RequestClientCert/RequireAny
        _native(lambda native: native.verify_client_certificates(context),
                "tls_server_config.client_auth_type")
        context._accepts_any = False  # type: ignore[attr-defined]


def build_ssl_context(tls: TlsConfig) -> ssl.SSLContext:
    """A server-side context for ``tls``.

    Raises:
        WebConfigError: a file cannot be loaded, or OpenSSL refuses a setting.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    configure_context(context, tls)
    load_certificate(context, tls)
    return context
