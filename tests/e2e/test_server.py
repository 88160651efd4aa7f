"""The real server as a subprocess: every route, formats, time passing, shutdown, logs."""

from __future__ import annotations

import gzip
import json
import signal
import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from exporter.catalogue import metrics
from exporter.catalogue.workloads import KUBERNETES
from tests.e2e.server import ExporterProcess

pytestmark = pytest.mark.slow

SCENARIO = "shared-workstation"
OPENMETRICS = "application/openmetrics-text; version=1.0.0"


@pytest.fixture(scope="module")
def server() -> Iterator[ExporterProcess]:
    with ExporterProcess(
        "--source", "simulated", "--scenario", SCENARIO, "--simulate.speed", "60",
        "--collector.min-interval", "0",
    ) as proc:
        yield proc


def _values(text: str, name: str) -> list[float]:
    return [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]


def test_metrics_text(server: ExporterProcess) -> None:
    response = httpx.get(server.url("/metrics"), headers={"Accept-Encoding": "identity"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert response.headers["cache-control"] == "no-store"
    assert "server-timing" in response.headers
    assert len(_values(response.text, metrics.MEMORY_TOTAL.name)) == 3  # the preset's 3 GPUs
    assert _values(response.text, metrics.SOURCE_UP.name) == [1.0]
    assert _values(response.text, metrics.PROCESS_MEMORY.name)  # processes with owners


def test_metrics_openmetrics(server: ExporterProcess) -> None:
    response = httpx.get(server.url("/metrics"), headers={"Accept": OPENMETRICS})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    names = {f.name for f in openmetrics_families(response.text)}  # type: ignore[no-untyped-call]
    assert metrics.MEMORY_USED.name in names
    assert response.text.endswith("# EOF\n")


def test_metrics_gzip(server: ExporterProcess) -> None:
    with httpx.stream(
        "GET", server.url("/metrics"), headers={"Accept-Encoding": "gzip"}
    ) as response:
        raw = b"".join(response.iter_raw())
        assert response.headers["content-encoding"] == "gzip"
    text = gzip.decompress(raw).decode()
    assert len(_values(text, metrics.MEMORY_USED.name)) == 3


def test_simulated_time_advances_between_scrapes() -> None:
    def leaker_memory(proc: ExporterProcess) -> int:
        body = httpx.get(proc.url("/api/v1/snapshot")).json()
        assert not body["stale"]
        return int(next(p["used_memory_bytes"] for p in body["gpus"][0]["processes"]
                        if p["pid"] == 7720))

    # memory-leak: pid 7720 leaks 45 MiB per simulated second; at speed 20 half a real
    # second is ~10 simulated seconds, ~450 MiB.
    with ExporterProcess("--source", "simulated", "--scenario", "memory-leak",
                         "--simulate.speed", "20", "--collector.min-interval", "0") as proc:
        began = time.monotonic()
        first = leaker_memory(proc)
        time.sleep(0.5)  # at least this long between the two (a loaded machine: longer)
        second = leaker_memory(proc)
        elapsed = time.monotonic() - began
    assert 200 << 20 < second - first < (45 << 20) * 20 * (elapsed + 1)


def test_snapshot_api(server: ExporterProcess) -> None:
    response = httpx.get(server.url("/api/v1/snapshot"))
    assert response.status_code == 200
    body = response.json()
    assert body["source"] == "simulated"
    assert body["hostname"] == "lab-ws-01"
    assert len(body["gpus"]) == 3
    users = {p["user"] for g in body["gpus"] for p in g["processes"] if p.get("user")}
    assert "alice" in users
    assert httpx.get(server.url("/openapi.json")).status_code == 404  # --web.api-docs is off


def test_health_ready_and_landing(server: ExporterProcess) -> None:
    assert httpx.get(server.url("/healthz")).text == "ok\n"
    assert httpx.get(server.url("/readyz")).json()["status"] == "ready"
    page = httpx.get(server.url("/"))
    assert page.status_code == 200
    assert "RTX A6000" in page.text
    assert "alice" in page.text


def test_bad_requests_never_500(server: ExporterProcess) -> None:
    assert httpx.get(server.url("/metrics/")).status_code == 404
    assert httpx.get(server.url("/no/such/page")).status_code == 404
    assert httpx.post(server.url("/metrics")).status_code == 405
    assert httpx.put(server.url("/healthz")).status_code == 405
    bad = httpx.get(server.url("/?refresh=often"))
    assert bad.status_code == 422
    assert "refresh" in bad.text
    odd = httpx.get(server.url("/metrics"), headers={
        "Accept": "application/openmetrics-text; version=x.y", "Accept-Encoding": "br;q=abc",
        "X-Prometheus-Scrape-Timeout-Seconds": "-3",
    })
    assert odd.status_code == 200
    assert httpx.get(server.url("/healthz")).status_code == 200  # still alive


def test_sigterm_exits_0_quickly() -> None:
    proc = ExporterProcess("--source", "simulated", "--scenario", "calm")
    assert httpx.get(proc.url("/metrics")).status_code == 200
    begin = time.monotonic()
    code = proc.stop(signal.SIGTERM)
    assert code == 0
    assert time.monotonic() - begin < 5
    assert not any("Traceback" in line for line in proc.lines)
    assert any("stopped" in line for line in proc.lines)


def test_sigint_exits_0() -> None:
    proc = ExporterProcess("--source", "simulated", "--scenario", "calm")
    assert proc.stop(signal.SIGINT) == 0


def test_json_logs_and_env_configuration() -> None:
    env = {"GPU_EXPORTER_WEB_TELEMETRY_PATH": "/gpu-metrics", "GPU_EXPORTER_LOG_FORMAT": "json",
           "GPU_EXPORTER_WEB_ACCESS_LOG": "true", "GPU_EXPORTER_NO_SUCH_FLAG": "1"}
    with ExporterProcess("--source", "simulated", "--scenario", "calm", env=env) as proc:
        assert httpx.get(proc.url("/gpu-metrics")).status_code == 200
        assert httpx.get(proc.url("/metrics")).status_code == 404
    records = [json.loads(line) for line in proc.lines if line.strip()]
    assert all({"ts", "level", "logger", "msg"} <= r.keys() for r in records)
    assert any("GPU_EXPORTER_NO_SUCH_FLAG" in r["msg"] and r["level"] == "warn" for r in records)
    assert any("/gpu-metrics" in r["msg"] for r in records)  # the access log is on


def test_kubernetes_scenario_exposes_pod_labels() -> None:
    with ExporterProcess(
        "--source", "simulated", "--scenario", "kubernetes-node", "--kubernetes"
    ) as proc:
        text = httpx.get(proc.url("/metrics"), headers={"Accept-Encoding": "identity"}).text
    labels = [
        s.labels
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == metrics.PROCESS_MEMORY.name
    ]
    assert labels
    assert all(set(KUBERNETES.labels) <= label.keys() for label in labels)
    assert any(label["namespace"] not in ("", metrics.UNKNOWN_VALUE) for label in labels)
