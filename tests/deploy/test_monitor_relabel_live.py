"""The chart's ServiceMonitor relabeling, applied by a real Prometheus to the real exporter.

The Prometheus Operator turns each endpoint's ``relabelings`` into ``relabel_configs`` one to
one and adds the target's ``namespace``/``pod``/``container`` labels before them. This test
gives a static target those labels (as the operator would), applies the chart's rendered
relabelings with the chart's ``honorLabels``, and scrapes ``--kubernetes`` output of the
``kubernetes-node`` scenario. It proves that the workload's pod labels survive, that a host
process does not inherit the exporter's own pod, and that the node name lands in ``node``.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.helm_render import render
from tests.processes import free_port

DEADLINE_S = 40
EXPORTER_POD = {"namespace": "gpu-monitoring", "pod": "gpu-exporter-x7k2p",
                "container": "exporter"}
NODE = "k8s-gpu-worker-3"
_KEYS = {"sourceLabels": "source_labels", "targetLabel": "target_label", "action": "action",
         "regex": "regex", "replacement": "replacement", "separator": "separator"}


def _query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as response:
        answer = json.loads(response.read().decode())
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def _endpoint() -> dict[str, Any]:
    rendered = render({"kubernetes": {"enabled": True}})
    endpoint: dict[str, Any] = rendered.one("ServiceMonitor")["spec"]["endpoints"][0]
    return endpoint


def _relabel_configs(relabelings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    configs = []
    for rule in relabelings:
        unknown = set(rule) - set(_KEYS)
        assert not unknown, f"relabeling field without a Prometheus equivalent here: {unknown}"
        configs.append({_KEYS[key]: value for key, value in rule.items()})
    return configs


@pytest.mark.slow
def test_workload_labels_survive_and_host_processes_get_no_exporter_pod(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]], prometheus_bin: str
) -> None:
    endpoint = _endpoint()
    exporter_port, prometheus_port = free_port(), free_port()
    processes.append(subprocess.Popen(
        [sys.executable, "-m", "exporter", "--source", "simulated", "--scenario",
         "kubernetes-node", "--kubernetes", f"--web.listen-address=127.0.0.1:{exporter_port}"],
        stdout=(tmp_path / "exporter.log").open("wb"), stderr=subprocess.STDOUT,
    ))
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{
            "job_name": "gpu-exporter",
            "honor_labels": endpoint["honorLabels"],
            "static_configs": [{
                "targets": [f"127.0.0.1:{exporter_port}"],
                # What the operator's service discovery and generated relabeling put there.
                "labels": {**EXPORTER_POD, "__meta_kubernetes_pod_node_name": NODE},
            }],
            "relabel_configs": _relabel_configs(endpoint["relabelings"]),
        }],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    processes.append(subprocess.Popen(
        [prometheus_bin, f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{prometheus_port}"],
        stdout=(tmp_path / "prometheus.log").open("wb"), stderr=subprocess.STDOUT,
    ))
    deadline = time.monotonic() + DEADLINE_S
    series: list[dict[str, Any]] = []
    while not series:
        for proc in processes:
            assert proc.poll() is None, f"{proc.args!r} exited; logs in {tmp_path}"
        with contextlib.suppress(OSError):
            series = _query(prometheus_port, "gpu_process_memory_used_bytes")
        assert time.monotonic() < deadline, "no per-process series scraped in time"
        time.sleep(0.3)

    labels = [s["metric"] for s in series]
    in_pods = [m for m in labels if m.get("pod")]
    host = [m for m in labels if "pod" not in m]
    assert {m["pod"] for m in in_pods} >= {"bert-finetune-7d9f8-x2kqp", "notebook-alice-0"}
    assert {m["namespace"] for m in in_pods} >= {"ml-training", "research"}
    assert {m["container"] for m in in_pods} >= {"trainer", "jupyter"}
    assert host, "the scenario's host process must be scraped without pod labels"
    for metric in labels:
        assert metric.get("pod") != EXPORTER_POD["pod"], metric
        assert metric.get("namespace") != EXPORTER_POD["namespace"], metric
        assert metric["exporter_pod"] == EXPORTER_POD["pod"]
        assert metric["exporter_namespace"] == EXPORTER_POD["namespace"]
        assert metric["node"] == NODE
    up = _query(prometheus_port, "up")
    assert [s["metric"].get("pod") for s in up] == [None]
