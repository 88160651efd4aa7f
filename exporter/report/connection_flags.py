"""The flags of ``gpu-exporter report`` (and its job summaries) that say how to reach
Prometheus, and the ``Connection`` they describe."""

from __future__ import annotations

import argparse
from pathlib import Path

from exporter.report.client import Connection

__all__ = ["add_connection_flags", "connection"]


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that say how to reach Prometheus (``connection`` reads them)."""
    conn = parser.add_argument_group("Prometheus")
    conn.add_argument("--prometheus.url", dest="url", default="http://localhost:9090",
                      help="base URL of the Prometheus HTTP API (default %(default)s)")
    conn.add_argument("--prometheus.ca-file", dest="ca_file", type=Path,
                      help="CA certificate(s) to verify the server's TLS certificate")
    conn.add_argument("--prometheus.cert-file", dest="cert_file", type=Path,
                      help="client certificate for mutual TLS")
    conn.add_argument("--prometheus.key-file", dest="key_file", type=Path,
                      help="key of the client certificate")
    conn.add_argument("--prometheus.insecure-skip-verify", dest="insecure",
                      action="store_true", help="do not verify the server's certificate")
    conn.add_argument("--prometheus.username", dest="username", help="basic-auth user")
    conn.add_argument("--prometheus.password-file", dest="password_file", type=Path,
                      help="file holding the basic-auth password")
    conn.add_argument("--prometheus.bearer-token-file", dest="token_file", type=Path,
                      help="file holding a bearer token")
    conn.add_argument("--prometheus.timeout", dest="timeout", default="60s",
                      help="per-request timeout (default %(default)s)")


def connection(args: argparse.Namespace, timeout: float) -> Connection:
    """The ``Connection`` the flags of ``add_connection_flags`` describe."""
    return Connection(
        url=args.url, ca_file=args.ca_file, cert_file=args.cert_file, key_file=args.key_file,
        insecure_skip_verify=args.insecure, username=args.username,
        password_file=args.password_file, bearer_token_file=args.token_file,
        timeout_seconds=timeout,
    )
