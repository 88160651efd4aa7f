"""How long the GPU's clocks were held back, per reason (group ``throttle_time``, opt-in).

``gpu_throttle_reason_active`` (group ``throttle``) is the driver's bitmask at the moment of
the collection: a 0/1 gauge sampled every 15 s misses short events and cannot say for how long
a GPU was slowed. NVML also keeps, per reason, the nanoseconds the clocks were held back since
the driver loaded: the perf-policy violation counters (``nvmlDeviceGetViolationStatus``, field
values 74-81) and the clock-event durations (fields 269-271). Their ``rate()`` is the share of
time the GPU was slowed for that reason (0-1), which the throttling alerts use where present.

All eleven are read in the one ``nvmlDeviceGetFieldValues`` call per GPU that reads every
field-value row (``exporter.sources.nvml.fields``); a reason whose field the GPU does not
answer falls back to the violation-status call of its perf policy, and is absent where neither
answers. On an H100 (driver 580) every field answers: under a power-capped matrix product the
``sw_power_cap`` counter grew 39.7 s in 40 s, ``low_utilization`` grew only while idle. The call
costs 1.3 ms per GPU (three fields ~0.56 ms each): hence an opt-in group.

Field ids are nvml.h's (CUDA 13.0 / R580); the clock-event durations were numbered 251-253 in
an earlier header, where 251+ now belong to power smoothing, so the ids are fixed here rather
than taken from the binding.
"""

from __future__ import annotations

from exporter.catalogue.metrics.core import (
    GPU_LABELS,
    Constant,
    FieldId,
    FieldRead,
    Group,
    Kind,
    Metric,
    NvmlFields,
    Since,
)


def _policy(reason: str, field: str, field_id: int, policy: str, value: int) -> FieldRead:
    """A perf-policy violation counter: its field value, else ``nvmlDeviceGetViolationStatus``."""
    return FieldRead(reason, (FieldId(f"NVML_FI_DEV_PERF_POLICY_{field}", field_id),),
                     Constant(f"NVML_PERF_POLICY_{policy}", value))


def _event(reason: str, field: str, field_id: int) -> FieldRead:
    """A clock-event duration with no perf policy behind it (field values only)."""
    return FieldRead(reason, (FieldId(f"NVML_FI_DEV_CLOCKS_EVENT_REASON_{field}", field_id),))


#: reason label -> how it is read, in exposition order. Reasons that share a name with a bit of
#: ``gpu_throttle_reason_active`` count the time that bit was set.
THROTTLE_TIME_READS: tuple[FieldRead, ...] = (
    _policy("sw_power_cap", "POWER", 74, "POWER", 0),
    _event("sw_thermal_slowdown", "SW_THERM_SLOWDOWN", 269),
    _event("hw_thermal_slowdown", "HW_THERM_SLOWDOWN", 270),
    _event("hw_power_brake_slowdown", "HW_POWER_BRAKE_SLOWDOWN", 271),
    _policy("sync_boost", "SYNC_BOOST", 76, "SYNC_BOOST", 2),
    _policy("thermal", "THERMAL", 75, "THERMAL", 1),
    _policy("board_limit", "BOARD_LIMIT", 77, "BOARD_LIMIT", 3),
    _policy("reliability", "RELIABILITY", 79, "RELIABILITY", 5),
    _policy("low_utilization", "LOW_UTILIZATION", 78, "LOW_UTILIZATION", 4),
    _policy("below_application_clocks", "TOTAL_APP_CLOCKS", 80, "TOTAL_APP_CLOCKS", 10),
    _policy("below_base_clocks", "TOTAL_BASE_CLOCKS", 81, "TOTAL_BASE_CLOCKS", 11),
)
THROTTLE_TIME_REASONS: tuple[str, ...] = tuple(
    read.label for read in THROTTLE_TIME_READS if read.label is not None)

THROTTLE_TIME = Metric(
    "gpu_throttle_seconds_total", Kind.COUNTER, Group.THROTTLE_TIME,
    "Time the driver held this GPU's clocks back for this reason since it loaded, in seconds: "
    "sw_power_cap, sw_thermal_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown, "
    "sync_boost, thermal, board_limit and reliability slow a busy GPU; low_utilization grows "
    "while it idles; below_application_clocks and below_base_clocks count any reason. rate() is "
    "the share of time slowed (0-1); absent where the GPU does not report the reason (opt-in: "
    "~1.6 ms per GPU per collection). dcgm-exporter: DCGM_FI_DEV_*_VIOLATION, "
    "DCGM_FI_DEV_CLOCKS_EVENT_REASON_*.",
    labels=(*GPU_LABELS, "reason"), label_values=THROTTLE_TIME_REASONS,
    nvml=NvmlFields(THROTTLE_TIME_READS, divisor=1e9),
    json_field="throttle_seconds", since=Since.DRIVER,
)
