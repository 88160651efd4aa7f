"""Per-GPU families: values, units, None handling, lost GPUs, groups."""

from __future__ import annotations

from dataclasses import replace

from exporter.catalogue import metrics
from exporter.catalogue.metrics import Group
from exporter.state import ExpositionOptions, default_groups
from tests.exposition import factory
from tests.exposition.parse import collect_text, samples, series, value

ALL_GROUPS = frozenset(Group)


def test_every_reading_is_exposed_with_gpu_and_uuid_labels() -> None:
    snap = factory.snapshot(factory.reading(0), factory.reading(3))
    text = collect_text(factory.state(snap), ExpositionOptions(groups=ALL_GROUPS))
    uuid3 = factory.identity(3).uuid
    assert value(text, metrics.MEMORY_TOTAL.name, gpu="3", uuid=uuid3) == 141 * factory.GIB
    assert value(text, metrics.MEMORY_USED.name, gpu="3") == 40 * factory.GIB
    assert value(text, metrics.UTILIZATION.name, gpu="0") == 0.75
    assert value(text, metrics.TEMPERATURE.name, gpu="0") == 61.0
    assert value(text, metrics.POWER_USAGE.name, gpu="0") == 450.5
    assert value(text, metrics.ENERGY.name, gpu="0") == 1.5e9
    assert value(text, metrics.PCIE_THROUGHPUT.name, gpu="0", direction="tx") == 2.0e8
    assert value(text, metrics.SM_CLOCK.name, gpu="0") == 1.98e9
    assert value(text, metrics.PERFORMANCE_STATE.name, gpu="0") == 0
    assert value(text, metrics.THROTTLE_ACTIVE.name, gpu="0", reason="sw_power_cap") == 1
    assert value(text, metrics.THROTTLE_ACTIVE.name, gpu="0", reason="gpu_idle") == 0
    assert value(text, metrics.ECC_ERRORS.name, gpu="0", type="corrected") == 3
    gpu_series = [
        labels
        for (name, labels) in samples(text)
        if name.startswith(metrics.PREFIX) and not name.startswith(metrics.SELF_PREFIX)
    ]
    assert gpu_series
    for labels in gpu_series:
        names = dict(labels)
        assert names["gpu"] in {"0", "3"}
        assert names["uuid"] == factory.identity(int(names["gpu"])).uuid


def test_gpu_info_carries_identity_and_driver() -> None:
    snap = factory.snapshot(factory.reading(0), cuda_driver_version=None)
    text = collect_text(factory.state(snap), ExpositionOptions())
    (info,) = series(text, metrics.GPU_INFO.name)
    assert info["name"] == "NVIDIA H200"
    assert info["pci_bus_id"] == factory.identity(0).pci_bus_id
    assert info["driver_version"] == "560.35.03"
    assert info["cuda_driver_version"] == ""
    assert info["hostname"] == "node-1"
    assert set(info) == set(metrics.GPU_INFO.labels)


def test_none_readings_leave_their_series_out() -> None:
    sparse = factory.reading(
        1,
        memory_reserved_bytes=None,
        fan_speed_ratio=None,
        temperature_celsius=None,
        throttle_reasons=None,
        ecc=None,
        power_usage_watts=None,
    )
    text = collect_text(factory.state(factory.snapshot(factory.reading(0), sparse)),
                        ExpositionOptions())
    for metric in (metrics.MEMORY_RESERVED, metrics.FAN_SPEED, metrics.TEMPERATURE,
                   metrics.POWER_USAGE):
        assert value(text, metric.name, gpu="1") is None, metric.name
        assert value(text, metric.name, gpu="0") is not None, metric.name
    assert [s for s in series(text, metrics.THROTTLE_ACTIVE.name) if s["gpu"] == "1"] == []
    assert value(text, metrics.ECC_ERRORS.name, gpu="1", type="corrected") is None
    assert "NaN" not in text


def test_family_without_any_sample_is_left_out() -> None:
    snap = factory.snapshot(factory.reading(0, fan_speed_ratio=None))
    text = collect_text(factory.state(snap), ExpositionOptions())
    assert metrics.FAN_SPEED.name not in text


def test_lost_gpu_exposes_info_and_up_zero_only() -> None:
    lost = factory.reading(1, up=False, error="GPU is lost", processes=(factory.process(7, 100),))
    text = collect_text(factory.state(factory.snapshot(factory.reading(0), lost)),
                        ExpositionOptions())
    assert value(text, metrics.GPU_UP.name, gpu="1") == 0
    assert value(text, metrics.GPU_UP.name, gpu="0") == 1
    gpu1 = {
        name
        for (name, labels) in samples(text)
        if ("gpu", "1") in labels
    }
    assert gpu1 == {metrics.GPU_INFO.name, metrics.GPU_UP.name}
    assert value(text, metrics.MEMORY_USED.name, gpu="0") == 40 * factory.GIB


def test_only_enabled_groups_are_exposed() -> None:
    groups = frozenset({Group.INFO, Group.TEMPERATURE, Group.EXPORTER})
    text = collect_text(factory.state(factory.snapshot(factory.reading(0))),
                        ExpositionOptions(groups=groups))
    names = {name for (name, _) in samples(text) if not name.startswith("gpu_exporter_")}
    assert names == {metrics.GPU_INFO.name, metrics.GPU_UP.name, metrics.TEMPERATURE.name}


def test_opt_in_groups_are_off_by_default() -> None:
    text = collect_text(factory.state(factory.snapshot(factory.reading(0))), ExpositionOptions())
    assert Group.ENERGY not in default_groups()
    assert value(text, metrics.ENERGY.name, gpu="0") is None
    assert series(text, metrics.PCIE_THROUGHPUT.name) == []


def test_only_catalogue_throttle_reasons_are_exposed() -> None:
    odd = {"hw_slowdown": 1.0, "brand_new_reason": 1.0}
    text = collect_text(
        factory.state(factory.snapshot(factory.reading(0, throttle_reasons=odd))),
        ExpositionOptions(),
    )
    reasons = {s["reason"] for s in series(text, metrics.THROTTLE_ACTIVE.name)}
    assert reasons == {"hw_slowdown"}


def test_snapshot_without_gpus_still_serves_self_metrics() -> None:
    down = replace(factory.snapshot(), source_up=False, source_error="libnvidia-ml.so.1 not found")
    text = collect_text(factory.state(down), ExpositionOptions())
    assert value(text, metrics.SOURCE_UP.name, source="simulated") == 0
    assert series(text, metrics.GPU_UP.name) == []
