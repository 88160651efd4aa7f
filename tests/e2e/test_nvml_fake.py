"""The CLI's NVML path end to end, with the fake pynvml: wiring, owners, and a hung driver."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.catalogue import metrics
from exporter.catalogue.workloads import KUBERNETES
from tests.e2e.server import ExporterProcess

pytestmark = pytest.mark.slow

MODULE = "tests.e2e.fake_nvml_main"


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]


def test_nvml_source_with_owner_enrichment() -> None:
    with ExporterProcess("--source", "nvml", module=MODULE) as proc:
        text = httpx.get(proc.url("/metrics")).text
        snapshot = httpx.get(proc.url("/api/v1/snapshot")).json()
        assert proc.stop(signal.SIGTERM) == 0
    assert _samples(text, metrics.SOURCE_UP.name) == [({"source": "nvml"}, 1.0)]
    assert len(_samples(text, metrics.MEMORY_TOTAL.name)) == 2
    processes = _samples(text, metrics.PROCESS_MEMORY.name)
    assert len(processes) == 1
    labels, value = processes[0]
    assert value == float(6 << 30)
    assert labels["pid"] == str(proc.proc.pid)  # the exporter's own process, found in /proc
    assert labels["user"] not in ("", metrics.UNKNOWN_VALUE)
    assert labels["process"].startswith("python")
    assert snapshot["source"] == "nvml"
    assert snapshot["driver_version"]


def test_hung_nvml_call_keeps_serving_and_shuts_down() -> None:
    env = {"GPU_EXPORTER_TEST_HANG": "nvmlDeviceGetUtilizationRates"}  # every GPU hangs
    # GPU reads time out after half the collector timeout: 1 s, which a re-wait would cost.
    with ExporterProcess("--source", "nvml", "--collector.timeout", "2s",
                         env=env, module=MODULE, wait_ready=False) as proc:
        timings = []
        for _ in range(3):
            begin = time.monotonic()
            response = httpx.get(proc.url("/metrics"), timeout=10)
            timings.append(time.monotonic() - begin)
            assert response.status_code == 200
        ready = httpx.get(proc.url("/readyz"), timeout=10)
        assert httpx.get(proc.url("/healthz")).status_code == 200
        begin = time.monotonic()
        code = proc.stop(signal.SIGTERM)
        stop_seconds = time.monotonic() - begin
    assert timings[0] < 8.0  # bounded by half of --collector.timeout per GPU
    assert max(timings[1:]) < 0.9  # hung GPUs are not waited for again (1 s each)
    text = response.text
    assert _samples(text, metrics.SOURCE_UP.name)[0][1] == 1.0  # NVML itself answers
    assert [v for _, v in _samples(text, metrics.GPU_UP.name)] == [0.0, 0.0]
    errors = {labels["kind"]: v for labels, v in _samples(text, metrics.ERRORS.name)}
    assert errors.get("gpu_timeout") == 2  # once per hung GPU, however many scrapes
    assert ready.status_code == 503
    assert "every GPU's NVML calls are hung" in ready.json()["reason"]
    assert ready.json()["hung_gpus"].keys() == {"0", "1"}
    assert code == 0
    assert stop_seconds < 6


def test_one_hung_gpu_does_not_stale_the_others() -> None:
    env = {"GPU_EXPORTER_TEST_HANG": "nvmlDeviceGetUtilizationRates",
           "GPU_EXPORTER_TEST_HANG_GPU": "1"}
    with ExporterProcess("--source", "nvml", "--collector.timeout", "2s",
                         "--collector.min-interval", "0", env=env, module=MODULE,
                         wait_ready=False) as proc:
        texts = [httpx.get(proc.url("/metrics"), timeout=10).text for _ in range(4)]
        ready = httpx.get(proc.url("/readyz"), timeout=10)
    for text in texts:
        up = {labels["gpu"]: v for labels, v in _samples(text, metrics.GPU_UP.name)}
        assert up == {"0": 1.0, "1": 0.0}
        used = {labels["gpu"]: v for labels, v in _samples(text, metrics.MEMORY_USED.name)}
        assert used == {"0": float(7 << 30)}  # the hung GPU shows no stale reading
        assert _samples(text, metrics.DATA_AGE.name)[0][1] < 2.0  # within the collector timeout
    errors = {labels["kind"]: v for labels, v in _samples(texts[-1], metrics.ERRORS.name)}
    assert errors.get("gpu_timeout") == 1
    assert "collection_timeout" not in errors
    assert ready.status_code == 200  # GPU 0 is served fresh
    assert ready.json()["hung_gpus"].keys() == {"1"}


def test_kubernetes_without_log_mounts_warns_and_serves(tmp_path: Path) -> None:
    missing = tmp_path / "no-pods"
    with ExporterProcess("--source", "nvml", "--kubernetes", "--kubernetes.pod-logs-dir",
                         str(missing), module=MODULE) as proc:
        text = httpx.get(proc.url("/metrics")).text
    labels = _samples(text, metrics.PROCESS_MEMORY.name)[0][0]
    assert set(KUBERNETES.labels) <= labels.keys()  # present, with no pod resolved
    assert any("--kubernetes.pod-logs-dir" in line and "not a directory" in line
               for line in proc.lines)
