"""A real Prometheus (Debian's) scrapes the real exporter over TLS with basic auth, and a
second one over mutual TLS; jobs with a wrong password, no client certificate and plain HTTP
are refused (target down, with the reason Prometheus gives)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml

from tests.e2e.secure_exporter import SecureExporter
from tests.processes import free_port
from tests.web.tlsfiles import Authority

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs Debian's prometheus"),
]
PASSWORD = "correct horse battery staple"


def _api(port: int, path: str, **params: str) -> Any:
    url = f"http://127.0.0.1:{port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)["data"]


def test_prometheus_scrapes_over_tls_basic_auth_and_mtls(tmp_path: Path) -> None:
    ca = Authority(tmp_path)
    server = ca.issue("server", "gpu-exporter")
    client = ca.issue("prometheus", "prometheus", server=False, sans=("prometheus",))
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    basic = tmp_path / "basic.yml"
    basic.write_text(yaml.safe_dump({
        "tls_server_config": {"cert_file": str(server.cert), "key_file": str(server.key)},
        "basic_auth_users": {"prometheus": hashed},
    }), encoding="utf-8")
    mutual = tmp_path / "mutual.yml"
    mutual.write_text(yaml.safe_dump({"tls_server_config": {
        "cert_file": str(server.cert), "key_file": str(server.key),
        "client_ca_file": str(ca.files.cert), "client_auth_type": "RequireAndVerifyClientCert",
    }}), encoding="utf-8")
    (tmp_path / "password").write_text(PASSWORD, encoding="utf-8")
    (tmp_path / "wrong").write_text("wrong", encoding="utf-8")
    common = ["--source", "simulated", "--scenario", "shared-workstation"]
    with SecureExporter(*common, "--web.config.file", str(basic)) as one, \
            SecureExporter(*common, "--web.config.file", str(mutual)) as two:
        tls = {"ca_file": str(ca.files.cert), "server_name": "127.0.0.1"}

        def job(name: str, port: int, **extra: Any) -> dict[str, Any]:
            return {"job_name": name, "scheme": "https", "tls_config": tls,
                    "static_configs": [{"targets": [f"127.0.0.1:{port}"]}], **extra}

        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
            "scrape_configs": [
                job("tls-basic-auth", one.port, basic_auth={
                    "username": "prometheus", "password_file": str(tmp_path / "password")}),
                job("wrong-password", one.port, basic_auth={
                    "username": "prometheus", "password_file": str(tmp_path / "wrong")}),
                job("mtls", two.port, tls_config={
                    **tls, "cert_file": str(client.cert), "key_file": str(client.key)}),
                job("mtls-no-client-cert", two.port),
                {"job_name": "plain-http", "static_configs": [
                    {"targets": [f"127.0.0.1:{one.port}"]}]},
            ],
        }
        config_path = tmp_path / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        check = subprocess.run(["promtool", "check", "config", str(config_path)],
                               capture_output=True, text=True, check=False)
        assert check.returncode == 0, check.stdout + check.stderr
        port = free_port()
        log = (tmp_path / "prometheus.log").open("wb")
        prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={config_path}", f"--storage.tsdb.path={tmp_path}/db",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 40
            targets: dict[str, dict[str, Any]] = {}
            while time.monotonic() < deadline:
                try:
                    active = _api(port, "targets")["activeTargets"]
                    targets = {t["labels"]["job"]: t for t in active}
                    if len(targets) == 5 and all(t["health"] != "unknown"
                                                 for t in targets.values()):
                        up = _api(port, "query", query='count by (job) (gpu_memory_used_bytes)')
                        if {r["metric"]["job"] for r in up["result"]} >= {"tls-basic-auth",
                                                                            "mtls"}:
                            break
                except OSError:
                    pass
                time.sleep(0.5)
            health = {name: t["health"] for name, t in targets.items()}
            assert health == {"tls-basic-auth": "up", "mtls": "up", "wrong-password": "down",
                              "mtls-no-client-cert": "down", "plain-http": "down"}, (
                health, {n: t["lastError"] for n, t in targets.items()})
            assert "401" in targets["wrong-password"]["lastError"]
            assert targets["tls-basic-auth"]["scrapeUrl"].startswith("https://")
            series = _api(port, "query", query="gpu_memory_used_bytes")["result"]
            assert {s["metric"]["job"] for s in series} == {"tls-basic-auth", "mtls"}
        finally:
            prometheus.terminate()
            prometheus.wait(10)
            log.close()
        assert one.proc.poll() is None
        assert two.proc.poll() is None
