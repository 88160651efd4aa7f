"""Fuzzed web config files: any YAML value, any text, any bytes either parses or raises
WebConfigError with one line: never another exception, never a hang."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.web.webconfig import WebConfigError, load_web_config, parse_web_config

KEYS = ["tls_server_config", "http_server_config", "basic_auth_users", "rate_limit",
        "unauthenticated_paths", "cert_file", "key_file", "client_auth_type", "min_version",
        "cipher_suites", "headers", "interval", "burst", "X-Frame-Options", "prom", "http2"]
SCALARS = (st.none() | st.booleans() | st.integers() | st.floats()
           | st.text(max_size=30) | st.sampled_from([*KEYS, "/healthz", "TLS13", "1s", "$2b$"]))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
FAST = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@FAST
@given(data=VALUES)
def test_any_value_parses_or_fails_cleanly(data: object) -> None:
    message = ""
    try:
        parse_web_config(data, "/nonexistent/web.yml")
    except WebConfigError as exc:
        message = str(exc)
    assert "\n" not in message


@FAST
@given(raw=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_any_file_parses_or_fails_cleanly(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "web.yml"
    path.write_bytes(raw)
    message = ""
    try:
        load_web_config(str(path))
    except WebConfigError as exc:
        message = str(exc)
    assert "\n" not in message
