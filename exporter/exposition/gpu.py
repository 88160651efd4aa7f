"""Per-GPU families: info, up, memory, utilisation, temperature, power, clocks, throttle, ECC.

A ``None`` reading leaves its series out (never 0 or NaN). A GPU with ``up=False`` exposes
``gpu_info`` and ``gpu_up 0`` only, so one sick GPU neither hides nor pollutes the others.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from exporter import catalogue as cat
from exporter.catalogue import Group, Metric
from exporter.exposition.families import FamilyData, family, gpu_label_values
from exporter.snapshot import GpuReading, Snapshot

__all__ = ["gpu_families"]

Reader = Callable[[GpuReading], "float | None"]
#: (value of the metric's extra label, reading) pairs of one GPU; None readings are left out.
LabelledReader = Callable[[GpuReading], Iterable[tuple[str, "float | None"]]]


@dataclass(frozen=True, slots=True)
class _Scalar:
    """A catalogue metric with one value per GPU, read from a ``GpuReading``."""

    metric: Metric
    read: Reader


# Order here is exposition order (groups in catalogue order).
_SCALARS: tuple[_Scalar, ...] = (
    _Scalar(cat.MEMORY_TOTAL, lambda r: r.identity.memory_total_bytes),
    _Scalar(cat.MEMORY_USED, lambda r: r.memory_used_bytes),
    _Scalar(cat.MEMORY_FREE, lambda r: r.memory_free_bytes),
    _Scalar(cat.MEMORY_RESERVED, lambda r: r.memory_reserved_bytes),
    _Scalar(cat.UTILIZATION, lambda r: r.utilization_ratio),
    _Scalar(cat.MEMORY_UTILIZATION, lambda r: r.memory_utilization_ratio),
    _Scalar(cat.TEMPERATURE, lambda r: r.temperature_celsius),
    _Scalar(cat.POWER_USAGE, lambda r: r.power_usage_watts),
    _Scalar(cat.POWER_LIMIT, lambda r: r.power_limit_watts),
    _Scalar(cat.ENERGY, lambda r: r.energy_joules),
    _Scalar(cat.FAN_SPEED, lambda r: r.fan_speed_ratio),
    _Scalar(cat.SM_CLOCK, lambda r: r.sm_clock_hertz),
    _Scalar(cat.MEMORY_CLOCK, lambda r: r.memory_clock_hertz),
    _Scalar(cat.GRAPHICS_CLOCK, lambda r: r.graphics_clock_hertz),
    _Scalar(cat.PERFORMANCE_STATE, lambda r: r.performance_state),
)


def _info(snapshot: Snapshot) -> Iterator[FamilyData]:
    info_family = family(cat.GPU_INFO)
    up = family(cat.GPU_UP)
    for gpu in snapshot.gpus:
        ident = gpu.identity
        labels = gpu_label_values(ident)
        info_family.add(
            (
                *labels,
                ident.name,
                ident.pci_bus_id,
                snapshot.driver_version or "",
                snapshot.cuda_driver_version or "",
                snapshot.hostname,
            ),
            1.0,
        )
        up.add(labels, 1.0 if gpu.up else 0.0)
    yield info_family
    yield up


def _labelled(metric: Metric, read: LabelledReader, gpus: list[GpuReading]) -> FamilyData:
    """``metric`` with one label after the GPU labels: a row per pair ``read`` gives."""
    fam = family(metric)
    for gpu in gpus:
        labels = gpu_label_values(gpu.identity)
        for extra, value in read(gpu):
            if value is not None:
                fam.add((*labels, extra), value)
    return fam


def _pcie(gpu: GpuReading) -> Iterable[tuple[str, float | None]]:
    return (("rx", gpu.pcie_rx_bytes_per_second), ("tx", gpu.pcie_tx_bytes_per_second))


def _throttle(gpu: GpuReading) -> Iterator[tuple[str, float | None]]:
    if gpu.throttle is None:
        return
    active = gpu.throttle.active
    # Only catalogue reasons: a driver's new reason must not create surprise series.
    for reason in cat.THROTTLE_REASONS:
        state = active.get(reason)
        if state is not None:
            yield reason, 1.0 if state else 0.0


def _ecc(gpu: GpuReading) -> Iterable[tuple[str, float | None]]:
    if gpu.ecc is None:
        return ()
    return (("corrected", gpu.ecc.corrected), ("uncorrected", gpu.ecc.uncorrected))


def _scalar(spec: _Scalar, gpus: list[GpuReading]) -> FamilyData:
    fam = family(spec.metric)
    for gpu in gpus:
        value = spec.read(gpu)
        if value is not None:
            fam.add(gpu_label_values(gpu.identity), value)
    return fam


def gpu_families(snapshot: Snapshot, groups: frozenset[Group]) -> Iterator[FamilyData]:
    """Per-GPU families of the enabled ``groups`` (process families live in ``processes``).

    Families without samples are left out (no bare HELP/TYPE lines).
    """
    for fam in _all(snapshot, groups):
        if fam.rows:
            yield fam


def _all(snapshot: Snapshot, groups: frozenset[Group]) -> Iterator[FamilyData]:
    if Group.INFO in groups:
        yield from _info(snapshot)
    healthy = [gpu for gpu in snapshot.gpus if gpu.up]
    for spec in _SCALARS:
        if spec.metric.group in groups:
            yield _scalar(spec, healthy)
        if spec.metric is cat.ENERGY and Group.PCIE in groups:
            yield _labelled(cat.PCIE_THROUGHPUT, _pcie, healthy)
    if Group.THROTTLE in groups:
        yield _labelled(cat.THROTTLE_ACTIVE, _throttle, healthy)
    if Group.ECC in groups:
        yield _labelled(cat.ECC_ERRORS, _ecc, healthy)
