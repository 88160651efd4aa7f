"""The compose demo, minus Docker: the demo exporter's command and docker/prometheus/prometheus.yml
with the repository's rules, run as local processes. Prometheus must load every rule group,
scrape the exporter and evaluate the recording rules.

Only what Docker's network provides is changed: the scrape targets point at 127.0.0.1 ports and
the intervals shrink to 1 s so the test is quick.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import recording
from tests.deploy.stack import (
    DOCKER,
    REPO,
    bind_mounts,
    host_path,
    rule_files,
    service,
    with_defaults,
)
from tests.processes import free_port

DEADLINE_S = 40


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read().decode())


def _wait(what: str, check: Any, procs: list[subprocess.Popen[bytes]], deadline: float) -> Any:
    while True:
        for proc in procs:
            assert proc.poll() is None, f"{proc.args!r} exited, see its log in the tmp dir"
        try:
            result = check()
            if result:
                return result
        except OSError:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


@pytest.mark.slow
def test_demo_stack_loads_rules_scrapes_and_records(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]], prometheus_bin: str
) -> None:
    deadline = time.monotonic() + DEADLINE_S
    exporter_port, prometheus_port = free_port(), free_port()

    args = [with_defaults(a) for a in service("exporter-demo")["command"]]
    env = {**os.environ, "GPU_EXPORTER_WEB_LISTEN_ADDRESS": f"127.0.0.1:{exporter_port}"}
    # Logs go to files: an unread pipe could fill and stall a process.
    with (tmp_path / "exporter.log").open("wb") as log:
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "exporter", *args], cwd=REPO, env=env,
            stdout=log, stderr=subprocess.STDOUT))

    home = tmp_path / "etc-prometheus"
    home.mkdir()
    for mount in bind_mounts("prometheus"):
        if mount["target"] == "/etc/prometheus/rules":
            (home / "rules").symlink_to(host_path(mount["source"]))
    config = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text("utf-8"))
    config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    targets = {"gpu-exporter": f"127.0.0.1:{exporter_port}",
               "prometheus": f"127.0.0.1:{prometheus_port}"}
    for job in config["scrape_configs"]:
        job["static_configs"] = [{"targets": [targets[job["job_name"]]]}]
    (home / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    with (tmp_path / "prometheus.log").open("wb") as log:
        processes.append(subprocess.Popen(
            [prometheus_bin, f"--config.file={home / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{prometheus_port}"],
            cwd=home, stdout=log, stderr=subprocess.STDOUT))
    api = f"http://127.0.0.1:{prometheus_port}/api/v1"

    expected_groups = [g["name"] for p in rule_files()
                       for g in yaml.safe_load(p.read_text("utf-8"))["groups"]]
    groups = _wait("rules", lambda: _get(f"{api}/rules")["data"]["groups"], processes, deadline)
    assert sorted(g["name"] for g in groups) == sorted(expected_groups)
    assert all(r["health"] != "err" for g in groups for r in g["rules"]), groups

    def exporter_up() -> bool:
        active = _get(f"{api}/targets")["data"]["activeTargets"]
        return any(t["labels"]["job"] == "gpu-exporter" and t["health"] == "up" for t in active)

    _wait("the exporter target to be up", exporter_up, processes, deadline)
    # Groups with their own interval (idle accounting: once a minute) may not have run yet
    # within the deadline; their rules are checked for health above and record elsewhere.
    fixed = {g["name"] for p in rule_files() for g in yaml.safe_load(p.read_text("utf-8"))["groups"]
             if "interval" in g}
    # The default demo (shared-workstation) has no pods or Slurm jobs: the workload records
    # are shown to produce series by the live test (kubernetes-node, slurm-node).
    fixed.add("gpu-exporter-recording-workloads")
    # No process of the default demo runs the PyTorch allocator publisher: the gpu-torch records
    # are shown to produce series by the live test (torch-memory-pressure, training-node).
    fixed.add("gpu-torch")
    # The default demo's GPUs (RTX 4090, RTX A6000) have no GPM: SM activity per node is
    # shown to record by the live test (input-starved, training-node).
    no_gpm = {recording.INSTANCE_SM_ACTIVE}
    records = [r["name"] for g in groups if g["name"] not in fixed
               for r in g["rules"] if r["type"] == "recording" and r["name"] not in no_gpm]
    assert records

    def recorded() -> bool:
        for record in records:
            query = urllib.parse.urlencode({"query": record})
            if not _get(f"{api}/query?{query}")["data"]["result"]:
                return False
        return True

    _wait("every recording rule to produce a result", recorded, processes, deadline)
