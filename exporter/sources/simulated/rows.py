"""The simulator's side of the per-GPU metric rows: each row it models, by the row's name, and
the function of the simulated GPU's state (``SimulatedGpu``) that gives its value.

The rows (``exporter.catalogue.metrics``) declare the metric; this table says how the
simulator fills it, so the rows never know the simulator's types. A row missing here is not
simulated (the simulated source leaves its series out); a function answering None leaves it out
for that GPU (the model has no such thing: no fan, no ECC, no GPM). The source works out the
``plan`` of the groups switched on once and calls ``simulated_values`` with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from exporter.catalogue import metrics
from exporter.catalogue.metrics import Group, Metric, Value
from exporter.sources.simulated.physics import SimulatedActivity, SimulatedGpu

#: A row's value for one simulated GPU (None: left out).
Simulate = Callable[[SimulatedGpu], "Value | None"]


def _activity(read: Callable[[SimulatedActivity], Value | None]) -> Simulate:
    """``read`` of the simulated GPU's GPM activity (None without GPM)."""
    return lambda gpu: None if gpu.activity is None else read(gpu.activity)


def _ecc(gpu: SimulatedGpu) -> Value | None:
    """A simulated GPU's whole life is the scenario: the volatile and lifetime counts agree."""
    return ({"corrected": gpu.ecc_corrected, "uncorrected": gpu.ecc_uncorrected}
            if gpu.model.ecc else None)


def _remap_flag(flag: str) -> Simulate:
    """One 0/1 field of the simulated row-remapping state."""
    return lambda gpu: (None if gpu.remapped_rows is None
                        else float(getattr(gpu.remapped_rows, flag)))


def _repair_counts(record: str, values: tuple[str, ...]) -> Simulate:
    """The lifetime counts of one memory-repair mechanism: the simulated record's fields named
    as the row's label values."""
    def simulate(gpu: SimulatedGpu) -> dict[str, float] | None:
        found = getattr(gpu, record)
        return None if found is None else {value: getattr(found, value) for value in values}

    return simulate


def _nvlink(name: str) -> Simulate:
    """One NVLink row's values by link (None: the scenario describes no links)."""
    return lambda gpu: None if gpu.nvlink is None else gpu.nvlink.get(name)


#: Every per-GPU row the simulator models, by row name.
SIMULATE: dict[str, Simulate] = {
    metrics.MEMORY_TOTAL.name: lambda gpu: gpu.memory_total_bytes,
    metrics.MEMORY_USED.name: lambda gpu: gpu.memory_used_bytes,
    metrics.MEMORY_FREE.name: lambda gpu: gpu.memory_free_bytes,
    metrics.MEMORY_RESERVED.name: lambda gpu: gpu.memory_reserved_bytes,
    # BAR1 spans the memory rounded up to a power of two (H200: 256 GiB, as measured).
    metrics.BAR1_TOTAL.name: lambda gpu: 1 << (gpu.memory_total_bytes - 1).bit_length(),
    # The driver's own mappings (1.6 MiB measured on an idle H200) plus 2 MiB a context.
    metrics.BAR1_USED.name: lambda gpu: 1_703_936 + (gpu.processes << 21),
    metrics.UTILIZATION.name: lambda gpu: gpu.utilization_ratio,
    metrics.MEMORY_UTILIZATION.name: lambda gpu: gpu.memory_utilization_ratio,
    metrics.TEMPERATURE.name: lambda gpu: gpu.temperature_celsius,
    metrics.POWER_USAGE.name: lambda gpu: gpu.power_usage_watts,
    metrics.POWER_LIMIT.name: lambda gpu: gpu.power_limit_watts,
    metrics.ENERGY.name: lambda gpu: gpu.energy_joules,
    metrics.PCIE_THROUGHPUT.name: lambda gpu: {
        "rx": round(0.06 * gpu.pcie_bytes_per_second, 0),
        "tx": round(0.015 * gpu.pcie_bytes_per_second, 0)},
    metrics.FAN_SPEED.name: lambda gpu: gpu.fan_speed_ratio,
    metrics.SM_CLOCK.name: lambda gpu: gpu.sm_clock_hertz,
    metrics.MEMORY_CLOCK.name: lambda gpu: gpu.memory_clock_hertz,
    metrics.GRAPHICS_CLOCK.name: lambda gpu: gpu.sm_clock_hertz,
    metrics.PERFORMANCE_STATE.name: lambda gpu: gpu.performance_state,
    metrics.THROTTLE_ACTIVE.name: lambda gpu: gpu.throttle_reasons,
    metrics.THROTTLE_TIME.name: lambda gpu: gpu.throttle_seconds,
    metrics.ECC_ERRORS.name: _ecc,
    # memory repair, XID events, MIG
    metrics.REMAPPED_ROWS.name: _repair_counts("remapped_rows",
                                               metrics.REMAPPED_ROWS.label_values),
    metrics.REMAP_PENDING.name: _remap_flag("pending"),
    metrics.REMAP_FAILURE.name: _remap_flag("failure"),
    metrics.RETIRED_PAGES.name: _repair_counts("retired_pages",
                                               metrics.RETIRED_PAGES.label_values),
    metrics.RETIRED_PENDING.name: lambda gpu: (
        None if gpu.retired_pages is None or gpu.retired_pages.pending is None
        else float(gpu.retired_pages.pending)),
    metrics.ECC_AGGREGATE.name: _ecc,
    metrics.XID_EVENTS_REGISTERED.name: lambda gpu: float(gpu.xid_events),
    metrics.HEALTH_EVENT_COUNT.name: lambda gpu: (
        dict.fromkeys(metrics.HEALTH_EVENTS, 0.0) if gpu.xid_events else None),
    metrics.MIG_ENABLED.name: lambda gpu: None if not gpu.model.mig else float(gpu.mig_enabled),
    # NVLink links (only where the scenario describes them)
    **{row.name: _nvlink(row.name) for row in (
        metrics.NVLINK_CRC_FLIT_ERRORS, metrics.NVLINK_CRC_DATA_ERRORS,
        metrics.NVLINK_REPLAY_ERRORS, metrics.NVLINK_RECOVERY_ERRORS, metrics.NVLINK_STATE)},
    # GPM activity
    metrics.GRAPHICS_ACTIVE.name: _activity(lambda a: a.graphics),
    metrics.SM_ACTIVE.name: _activity(lambda a: a.sm),
    metrics.SM_OCCUPANCY.name: _activity(lambda a: a.occupancy),
    metrics.TENSOR_ACTIVE.name: _activity(lambda a: a.tensor),
    metrics.TENSOR_PIPE_ACTIVE.name: _activity(lambda a: a.tensor_pipes),
    metrics.DRAM_ACTIVE.name: _activity(lambda a: a.dram),
    metrics.PIPE_ACTIVE.name: _activity(lambda a: a.pipes),
    metrics.PCIE_TRAFFIC.name: _activity(lambda a: a.pcie),
    metrics.NVLINK_TRAFFIC.name: _activity(lambda a: a.nvlink),
    metrics.GPM_STATUS.name: lambda gpu: {"ok" if gpu.model.gpm else "not_supported": 1.0},
}


#: The rows of some groups the simulator models, in row order: (name, function).
Plan = tuple[tuple[str, Simulate], ...]


def plan(rows: Iterable[Metric], groups: frozenset[Group]) -> Plan:
    """Which of ``rows`` the simulator fills with ``groups`` on (worked out once per set of
    groups)."""
    return tuple((row.name, SIMULATE[row.name]) for row in rows
                 if row.group in groups and row.name in SIMULATE)


def simulated_values(rows: Plan, state: SimulatedGpu) -> dict[str, Value]:
    """The values of ``rows`` for ``state``, by row name (None answers are left out)."""
    values: dict[str, Value] = {}
    for name, simulate in rows:
        value = simulate(state)
        if value is not None:
            values[name] = value
    return values
