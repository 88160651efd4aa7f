"""The pod-label join (dashboards/pod_labels.py) in a real Prometheus: the exporter on the
dra-node scenario and a kube-state-metrics stand-in serving ``kube_pod_labels``, scraped every
second, with the template filled for two pod labels. The joined records carry exactly the
allow-listed labels, for pods that have them, with the exporter's values unchanged."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from dashboards import pod_labels
from exporter.catalogue import metrics
from tests.dashboards.live import PROMETHEUS, ROOT, Stack, http_get, wait_until
from tests.processes import free_port

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(120),
    pytest.mark.skipif(not PROMETHEUS.exists(), reason="needs Debian's prometheus package"),
]

#: What kube-state-metrics (--metric-labels-allowlist=pods=[*]) exports for the dra-node pods;
#: the notebook has no team label, and nobody allow-listed "secret".
KUBE_POD_LABELS = """\
# TYPE kube_pod_labels gauge
kube_pod_labels{namespace="ml-training",pod="llm-pretrain-0",uid="u1",label_team="llm",\
label_app_kubernetes_io_name="pretrain",label_secret="s1"} 1
kube_pod_labels{namespace="inference",pod="embedder-0",uid="u2",label_team="search",\
label_app_kubernetes_io_name="embedder",label_secret="s2"} 1
kube_pod_labels{namespace="research",pod="notebook-bob-0",uid="u3",\
label_app_kubernetes_io_name="jupyter"} 1
"""
KEYS = ("team", "app.kubernetes.io/name")


class _KubeStateMetrics(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = KUBE_POD_LABELS.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp: Path = tmp_path_factory.mktemp("pod-labels")
    live = Stack(tmp)
    ksm = ThreadingHTTPServer(("127.0.0.1", 0), _KubeStateMetrics)
    threading.Thread(target=ksm.serve_forever, daemon=True).start()
    port = free_port()
    with (tmp / "exporter.log").open("wb") as out:
        exporter = subprocess.Popen(
            [sys.executable, "-m", "exporter", "--source", "simulated", "--scenario",
             "dra-node", "--kubernetes", "--web.listen-address", f"127.0.0.1:{port}",
             "--log.level", "warning"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        rules = tmp / "pod-labels.yaml"
        rules.write_text(pod_labels.instantiate(
            (ROOT / pod_labels.TEMPLATE).read_text(encoding="utf-8"), KEYS))
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                       "scrape_timeout": "900ms"},
            "rule_files": [str(rules)],
            "scrape_configs": [
                {"job_name": "gpu-exporter", "static_configs": [
                    {"targets": [f"127.0.0.1:{port}"]}]},
                {"job_name": "kube-state-metrics", "static_configs": [
                    {"targets": [f"127.0.0.1:{ksm.server_address[1]}"]}]},
            ],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        live.prometheus_port = free_port()
        log = (tmp / "prometheus.log").open("wb")
        live.prometheus = subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{live.prometheus_port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 60
        wait_until("the exporter", lambda: http_get(
            f"http://127.0.0.1:{port}/healthz", timeout=1.0)[0] == 200, deadline)
        wait_until("Prometheus", lambda: http_get(
            live.api_base + "/-/ready", timeout=1.0)[0] == 200, deadline)
        wait_until("every joined record", lambda: all(
            _series(live, pod_labels.record(row)) for row in pod_labels.JOINED), deadline)
        yield live
    finally:
        ksm.shutdown()
        live.close()
        exporter.terminate()
        exporter.wait(10)


def _series(stack: Stack, expr: str) -> list[dict[str, str]]:
    answer = stack.api("/api/v1/query", query=expr)
    assert answer["status"] == "success", answer
    return [item["metric"] for item in answer["data"]["result"]]


def test_the_allow_listed_labels_and_no_others_reach_every_joined_family(stack: Stack) -> None:
    names = {pod_labels.label_name(key) for key in KEYS}
    assert names == {"label_team", "label_app_kubernetes_io_name"}
    for row in pod_labels.JOINED:
        found = _series(stack, pod_labels.record(row))
        assert found, row.name
        assert all("label_secret" not in labels for labels in found), row.name
        teams = {(s["namespace"], s["pod"]): s.get("label_team") for s in found}
        assert teams[("ml-training", "llm-pretrain-0")] == "llm", row.name
        assert teams[("research", "notebook-bob-0")] is None, row.name  # no such pod label
        assert {s["label_app_kubernetes_io_name"] for s in found} >= {"pretrain", "jupyter"}


def test_the_join_keeps_the_exporters_series_and_values(stack: Stack) -> None:
    memory = metrics.WORKLOAD_MEMORY.name
    joined = pod_labels.record(metrics.WORKLOAD_MEMORY)
    answer = stack.api("/api/v1/query", query=(
        f"{joined} - ignoring (label_team, label_app_kubernetes_io_name) {memory}"))
    differences = [float(item["value"][1]) for item in answer["data"]["result"]]
    raw = _series(stack, f'{memory}{{pod!=""}}')
    assert len(differences) == len(raw) == 4  # every pod process series, one each
    assert differences == [0.0] * 4
    claims = _series(stack, pod_labels.record(metrics.ALLOCATION_CLAIM_INFO))
    assert {(c["claim"], c.get("label_team")) for c in claims} == {
        ("llm-pretrain-0-gpus", "llm"), ("embedder-gpu", "search"), ("notebook-bob-gpu", None)}
