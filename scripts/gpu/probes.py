"""What the GPU checks ask of the machine (shell, nvidia-smi, users) and of a running exporter
(HTTP: a URL, a scrape, readiness)."""

from __future__ import annotations

import pwd
import signal
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


def sh(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=60).stdout


def smi_apps() -> dict[int, float]:
    """nvidia-smi's compute processes: pid -> used memory in MiB."""
    out = sh("nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
    apps = {}
    for line in out.strip().splitlines():
        if line.strip():
            pid, used = (v.strip() for v in line.split(","))
            apps[int(pid)] = float(used)
    return apps


def ensure_user(name: str) -> pwd.struct_passwd:
    """The Unix user ``name``, created (no home, no login) when missing."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        sh("useradd", "--no-create-home", "--shell", "/bin/sh", name)
        return pwd.getpwnam(name)


def get(url: str, timeout: float = 10) -> tuple[int, bytes, float]:
    """(HTTP status, body, seconds taken); an error status is returned, not raised."""
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read(), time.perf_counter() - t0
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), time.perf_counter() - t0


def scrape(base: str) -> dict[str, list[Any]]:
    """The exporter's ``/metrics``: sample name -> its samples."""
    _, body, _ = get(base + "/metrics")
    series: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            series.setdefault(sample.name, []).append(sample)
    return series


def wait_ready(base: str, exporter: subprocess.Popen[bytes], seconds: float = 60) -> bool:
    """True once ``/readyz`` answers 200; False when the exporter exits or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if exporter.poll() is not None:
            return False
        try:
            if get(base + "/readyz", timeout=2)[0] == 200:
                return True
        except OSError:
            pass
        time.sleep(0.3)
    return False


def stop(exporter: subprocess.Popen[bytes]) -> int | None:
    """SIGTERM, then SIGKILL after 15 s; the exit status, None when it had to be killed."""
    exporter.send_signal(signal.SIGTERM)
    try:
        return exporter.wait(timeout=15)
    except subprocess.TimeoutExpired:
        exporter.kill()
        return None
