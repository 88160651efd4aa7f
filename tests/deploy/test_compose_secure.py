"""compose.secure.yaml and docker/secure/: the secrets script makes a web config the exporter
accepts, the real exporter serves it over HTTPS with basic auth, and Prometheus' config for it
passes promtool."""

from __future__ import annotations

import json
import os
import re
import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import bcrypt
import httpx
import pytest
import yaml

from exporter.config import FLAGS
from exporter.web.webconfig import load_web_config
from tests.deploy.stack import DOCKER
from tests.e2e.secure_exporter import SecureExporter

pytestmark = pytest.mark.slow
SECURE = DOCKER / "secure"


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("secrets")
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl CLI")
    subprocess.run(["bash", str(SECURE / "make-secrets.sh")], check=True, capture_output=True,
                   env={**os.environ, "SECRETS_DIR": str(out), "PYTHON": sys.executable},
                   timeout=60)
    return out


def test_secrets_make_a_valid_web_config(secrets: Path) -> None:
    config = load_web_config(str(secrets / "web-config.yml"))
    assert config.tls is not None
    password = (secrets / "password").read_text(encoding="utf-8").strip()
    assert bcrypt.checkpw(password.encode(), config.users["prometheus"])
    assert not (secrets / "ca.key").exists()  # the CA key is not kept around


def test_overlay_points_the_exporter_at_the_secrets() -> None:
    overlay = yaml.safe_load((DOCKER / "compose.secure.yaml").read_text(encoding="utf-8"))
    for name in ("exporter", "exporter-demo"):
        env = overlay["services"][name]["environment"]
        assert env["GPU_EXPORTER_WEB_CONFIG_FILE"] == "/etc/gpu-exporter/web/web-config.yml"
        assert "GPU_EXPORTER_WEB_CONFIG_FILE" in {f.env for f in FLAGS}
        mounts = {m["target"]: m for m in overlay["services"][name]["volumes"]}
        assert mounts["/etc/gpu-exporter/web"]["read_only"] is True


def test_exporter_serves_the_secrets_and_prometheus_config_checks(secrets: Path,
                                                                  tmp_path: Path) -> None:
    password = (secrets / "password").read_text(encoding="utf-8").strip()
    with SecureExporter("--source", "simulated", "--scenario", "calm",
                        "--web.config.file", str(secrets / "web-config.yml")) as exporter:
        context = ssl.create_default_context(cafile=str(secrets / "ca.crt"))
        with httpx.Client(verify=context, timeout=10) as client:
            url = f"https://127.0.0.1:{exporter.port}/metrics"
            assert client.get(url).status_code == 401
            assert client.get(url, auth=("prometheus", password)).status_code == 200
    config = (SECURE / "prometheus.yml").read_text(encoding="utf-8")
    config = config.replace("secrets/", f"{secrets}/").replace("rules/*.yaml",
                                                               f"{tmp_path}/none-*.yaml")
    (tmp_path / "prometheus.yml").write_text(config, encoding="utf-8")
    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "config", str(tmp_path / "prometheus.yml")],
                               capture_output=True, text=True, check=False)
        assert check.returncode == 0, check.stdout + check.stderr


def test_image_healthcheck_works_behind_tls_and_basic_auth(secrets: Path) -> None:
    dockerfile = (DOCKER / "Dockerfile").read_text(encoding="utf-8")
    match = re.search(r"^HEALTHCHECK .*\\\n\s+CMD (\[.*\])$", dockerfile, re.MULTILINE)
    assert match is not None
    argv = json.loads(match.group(1))
    with SecureExporter("--source", "simulated", "--scenario", "calm",
                        "--web.config.file", str(secrets / "web-config.yml")) as exporter:
        env = {**os.environ, "GPU_EXPORTER_WEB_LISTEN_ADDRESS": f"127.0.0.1:{exporter.port}"}
        check = subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True,
                               text=True, timeout=30, check=False)
        assert check.returncode == 0, check.stderr
    check = subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True,
                           text=True, timeout=30, check=False)
    assert check.returncode == 1  # nothing listens any more
