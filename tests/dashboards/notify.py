"""A real Alertmanager with local sinks, for the notification tests.

An SMTP sink (aiosmtpd) and a chat webhook receiver collect what Alertmanager sends; both bind
127.0.0.1 on free ports and record when each message arrived. ``alertmanager`` starts Debian's
``prometheus-alertmanager`` (clustering off) on the configuration ``dashboards.alertmanager``
writes for a contacts document.
"""

from __future__ import annotations

import email
import email.policy
import json
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiosmtpd.controller import Controller

from dashboards import alertmanager, contacts
from tests.dashboards.live import http_get, wait_until
from tests.processes import free_port, stop_all

#: Debian's package installs the server under this name (upstream: alertmanager).
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
AMTOOL = shutil.which("amtool")


def require_alertmanager() -> tuple[str, str]:
    """The alertmanager and amtool paths; skips (one line saying why) when they are missing."""
    if ALERTMANAGER is None or AMTOOL is None:
        pytest.skip("Alertmanager not installed (apt-get install prometheus-alertmanager)")
    return ALERTMANAGER, AMTOOL


def amtool(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run amtool, bounded in time."""
    _, tool = require_alertmanager()
    return subprocess.run([tool, *map(str, args)], capture_output=True, text=True, timeout=60,
                          check=False, cwd=cwd)


@dataclass(frozen=True)
class Mail:
    """One message the SMTP sink accepted."""

    at: float  # Unix time it arrived
    recipients: tuple[str, ...]
    message: EmailMessage

    @property
    def subject(self) -> str:
        return str(self.message["Subject"])

    @property
    def text(self) -> str:
        """The plain-text body."""
        body = self.message.get_body(preferencelist=("plain",))
        assert body is not None, self.message
        return str(body.get_content())


@dataclass
class _Collected:
    mails: list[Mail] = field(default_factory=list)
    posts: list[tuple[float, str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _SmtpHandler:
    """aiosmtpd handler: keeps every message."""

    def __init__(self, collected: _Collected) -> None:
        self.collected = collected

    async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        with self.collected.lock:
            self.collected.mails.append(Mail(time.time(), tuple(envelope.rcpt_tos), message))
        return "250 OK"


@dataclass
class Sinks:
    """The SMTP sink and the webhook receiver, and what they got."""

    smtp_port: int
    webhook_port: int
    collected: _Collected

    def mails_to(self, address: str) -> list[Mail]:
        with self.collected.lock:
            return [m for m in self.collected.mails if address in m.recipients]

    def recipients(self) -> set[str]:
        with self.collected.lock:
            return {r for m in self.collected.mails for r in m.recipients}

    def posts(self, path: str) -> list[tuple[float, Any]]:
        """(arrival time, decoded JSON) of every POST to ``path``."""
        with self.collected.lock:
            return [(at, body) for at, where, body in self.collected.posts if where == path]


@contextmanager
def sinks() -> Iterator[Sinks]:
    """Start both sinks; stop them on exit."""
    collected = _Collected()

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"null")
            with collected.lock:
                collected.posts.append((time.time(), self.path, body))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            return

    web = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=web.serve_forever, daemon=True)
    thread.start()
    smtp = Controller(_SmtpHandler(collected), hostname="127.0.0.1", port=free_port())
    smtp.start()
    try:
        yield Sinks(smtp.port, int(web.server_address[1]), collected)
    finally:
        smtp.stop()
        web.shutdown()
        web.server_close()


def lab_contacts(sink: Sinks, timings: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """A lab's contacts: owners at user@lab.example, the operator by mail and chat, a lead."""
    return {
        "email_domain": "lab.example",
        "smtp": {"smarthost": f"127.0.0.1:{sink.smtp_port}", "from": "gpu-exporter@lab.example",
                 "require_tls": False},
        "operator": {"email": "gpu-admins@lab.example",
                     "chat": {"webhook_url": f"http://127.0.0.1:{sink.webhook_port}/operator",
                              "channel": "#gpu-ops"}},
        "lead": "lab-lead@lab.example",
        "grafana_url": "https://grafana.lab.example",
        "site_name": "the test lab",
        "timings": {kind: dict(values) for kind, values in timings.items()},
    }


def write_config(folder: Path, document: Mapping[str, Any]) -> Path:
    """Write the contacts file and the Alertmanager files generated from it; the config's path."""
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "contacts.yaml"
    source.write_text(yaml.safe_dump(dict(document)))
    for name, text in alertmanager.render(contacts.load(source), str(source)).items():
        (folder / name).write_text(text)
    return folder / alertmanager.CONFIG_FILE


@dataclass
class Alertmanager:
    """A running Alertmanager."""

    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alerts(self, **filters: str) -> list[dict[str, Any]]:
        """The alerts it holds (``/api/v2/alerts``), those matching ``filters`` label=value."""
        status, body = http_get(self.url + "/api/v2/alerts", timeout=5.0)
        assert status == 200, body
        found: list[dict[str, Any]] = json.loads(body)
        return [a for a in found if all(a["labels"].get(k) == v for k, v in filters.items())]


@contextmanager
def alertmanager_running(config: Path, tmp: Path, deadline: float) -> Iterator[Alertmanager]:
    """Start Alertmanager on ``config`` (127.0.0.1, no cluster); stop it on exit.

    Raises:
        RuntimeError: it exited (its log in the message).
        TimeoutError: it was not ready by ``deadline``.
    """
    binary, _ = require_alertmanager()
    port = free_port()
    log = tmp / "alertmanager.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.path={tmp / 'am-data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
             "--log.level=warn"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    manager = Alertmanager(port, process, log)

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"alertmanager exited:\n{log.read_text()[-2000:]}")
        return http_get(manager.url + "/-/ready", timeout=1.0)[0] == 200

    try:
        wait_until("Alertmanager ready", ready, deadline)
        yield manager
    finally:
        stop_all([process], timeout=5)


def post_alerts(manager: Alertmanager, alerts: list[dict[str, Any]]) -> None:
    """Send alerts to Alertmanager as Prometheus does (``POST /api/v2/alerts``)."""
    request = urllib.request.Request(manager.url + "/api/v2/alerts",
                                     data=json.dumps(alerts).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200
