"""GPU health end to end: the real CLI and server over the health fake NVML.

XIDs delivered as NVML events reach /metrics through the background waiter; a MIG GPU exposes
its instances with the exporter's own process (found in the real /proc) as their user; SIGTERM
stops the waiter and the server cleanly; with ``--no-collector.xid`` no waiter runs at all.
"""

from __future__ import annotations

import signal
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.catalogue import metrics
from tests.e2e.server import ExporterProcess

pytestmark = pytest.mark.slow

MODULE = "tests.e2e.fake_nvml_health_main"


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name]


def _scrape_until(proc: ExporterProcess, name: str, wanted: int, timeout: float = 15) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = httpx.get(proc.url("/metrics")).text
        if sum(v for _, v in _samples(text, name)) >= wanted:
            return text
        time.sleep(0.2)
    return text


def _scrape_once(*flags: str, env: dict[str, str] | None = None) -> tuple[str, ExporterProcess]:
    """One scrape of an exporter on the health fake, then a clean SIGTERM; the text and the
    stopped process (its log, its pid)."""
    with ExporterProcess("--source", "nvml", *flags, module=MODULE, env=env) as proc:
        text = httpx.get(proc.url("/metrics")).text
        assert proc.stop(signal.SIGTERM) == 0
    return text, proc


def _by_gpu(text: str, name: str) -> dict[str, float]:
    return {labels["gpu"]: value for labels, value in _samples(text, name)}


def test_xids_from_nvml_events_reach_metrics_and_sigterm_is_clean() -> None:
    env = {"GPU_EXPORTER_TEST_XIDS": "0:79,1:31x5"}
    with ExporterProcess("--source", "nvml", "--collector.min-interval", "0", module=MODULE,
                         env=env) as proc:
        text = _scrape_until(proc, metrics.XID_ERRORS.name, 6)
        began = time.monotonic()
        assert proc.stop(signal.SIGTERM) == 0
        took = time.monotonic() - began
    errors = {(labels["gpu"], labels["xid"]): value
              for labels, value in _samples(text, metrics.XID_ERRORS.name)}
    assert errors == {("0", "79"): 1.0, ("1", "31"): 5.0}
    last = _samples(text, metrics.LAST_XID.name)
    assert len(last) == 2
    assert all(abs(value - time.time()) < 120 for _, value in last)
    assert [v for _, v in _samples(text, metrics.XID_EVENTS_REGISTERED.name)] == [1.0, 1.0]
    events = _samples(text, metrics.HEALTH_EVENT_COUNT.name)
    assert {labels["event"] for labels, _ in events} == set(metrics.HEALTH_EVENTS)
    assert all(value == 0.0 for _, value in events)
    assert took < 5.0, proc.log
    assert "XID event waiter stopped" in proc.log


def test_unsupported_events_and_switched_off_group() -> None:
    text, proc = _scrape_once(env={"GPU_EXPORTER_TEST_NO_EVENTS": "1"})
    assert _by_gpu(text, metrics.XID_EVENTS_REGISTERED.name) == {"0": 1.0, "1": 0.0}
    assert "not watched" in proc.log
    text, proc = _scrape_once("--no-collector.xid")
    assert not _samples(text, metrics.XID_EVENTS_REGISTERED.name)
    assert "XID event waiter" not in proc.log


def test_mig_gpu_instances_with_their_users() -> None:
    text, proc = _scrape_once(env={"GPU_EXPORTER_TEST_MIG": "1"})
    assert _by_gpu(text, metrics.MIG_ENABLED.name) == {"0": 1.0, "1": 0.0}
    info = sorted((labels["gpu_instance"], labels["compute_instance"], labels["gpu_profile"])
                  for labels, _ in _samples(text, metrics.MIG_INFO.name))
    assert info == [("2", "0", "3g.71gb"), ("7", "0", "1g.18gb")]
    total = {labels["gpu_instance"]: value
             for labels, value in _samples(text, metrics.MIG_MEMORY_TOTAL.name)}
    assert total == {"2": float(70 << 30), "7": float(17 << 30)}
    users = _samples(text, metrics.MIG_USER_MEMORY.name)
    assert len(users) == 1
    labels, value = users[0]
    assert labels["gpu_instance"] == "7"
    # The exporter's own process, its owner read from /proc.
    assert labels["user"] not in ("", metrics.UNKNOWN_VALUE)
    assert value == float(6 << 30)
    # The same process in the parent GPU's per-process series, so per-user views work.
    processes = _samples(text, metrics.PROCESS_MEMORY.name)
    assert [(p["gpu"], p["pid"]) for p, _ in processes] == [("0", str(proc.proc.pid))]
    assert not [s for s in _samples(text, metrics.UTILIZATION.name) if s[0]["gpu"] == "0"]
