"""Alerts on XID errors and on memory repair (row remapping, page retirement).

XID alerts read ``gpu_last_xid_timestamp_seconds`` rather than ``increase()`` of the counter:
the counter's series appears with its first event already counted, which ``increase()`` cannot
see, so the first XID of a code on a GPU would never alert. The time of the last event fires at
the next evaluation and keeps the alert active for XID_RECENT_SECONDS after the last one.
"""

from __future__ import annotations

from dashboards import xids
from dashboards.promql import num
from dashboards.rules import GPU_TEXT, AlertRule, RuleGroup
from exporter.catalogue import metrics
from exporter.catalogue.thresholds import (
    REMAP_PENDING_FOR,
    XID_NOT_WATCHED_FOR,
    XID_RECENT_SECONDS,
    XID_STORM_FOR,
    XID_STORM_RATE,
    XID_STORM_WINDOW,
)

XID_ERRORS = metrics.XID_ERRORS.name
LAST_XID = metrics.LAST_XID.name
XID_REGISTERED = metrics.XID_EVENTS_REGISTERED.name
REMAP_PENDING = metrics.REMAP_PENDING.name
REMAP_FAILURE = metrics.REMAP_FAILURE.name
RETIRED_PENDING = metrics.RETIRED_PENDING.name

_MIG = ("{{ with $labels.gpu_instance }}, MIG GPU instance {{ . }}"
        "{{ with $labels.gpu_profile }} ({{ . }}){{ end }}{{ end }}")


def _recent(kind: xids.XidClass) -> str:
    return (f'time() - {LAST_XID}{{xid=~"{xids.regex(kind)}"}} '
            f"< {num(XID_RECENT_SECONDS)}")


def xid_group() -> RuleGroup:
    """XIDs: hardware faults at once, application faults for information, storms."""
    minutes = XID_RECENT_SECONDS // 60
    hardware = AlertRule(
        alert="GpuXidHardwareError",
        expr=_recent(xids.XidClass.HARDWARE),
        for_="0s",
        severity="critical",
        summary="A GPU reported an XID that means a hardware fault or lost data.",
        description=(
            f"{GPU_TEXT} reported XID {{{{ $labels.xid }}}}{_MIG} "
            "{{ $value | humanizeDuration }} ago: a hardware fault or lost data (uncorrectable "
            "memory error, NVLink, fallen off the bus, GPU firmware). Drain the GPU and follow "
            "the runbook's XID table. "
            f"Stays active {minutes} minutes after the last such XID."
        ),
    )
    application = AlertRule(
        alert="GpuXidApplicationError",
        expr=_recent(xids.XidClass.APPLICATION),
        for_="0s",
        severity="info",
        summary="An application caused an XID on a GPU.",
        description=(
            f"{GPU_TEXT} reported XID {{{{ $labels.xid }}}}{_MIG} "
            "{{ $value | humanizeDuration }} ago: a job's own fault (kernel exception, illegal "
            "memory access); the GPU stays healthy. NVML does not say which process: the "
            "kernel log line (dmesg | grep Xid) carries its pid."
        ),
    )
    storm = AlertRule(
        alert="GpuXidStorm",
        expr=(f"sum without (xid, gpu_instance, compute_instance) "
              f"(rate({XID_ERRORS}[{XID_STORM_WINDOW}])) > {num(XID_STORM_RATE)}"),
        for_=XID_STORM_FOR,
        severity="warning",
        summary="A GPU reports XIDs continuously.",
        description=(
            f"{GPU_TEXT} has reported more than one XID every {1 / XID_STORM_RATE:.0f} s for "
            f"{XID_STORM_FOR} (now {{{{ $value | humanize }}}} per second): something fails in a "
            "loop (a job restarting on a broken GPU, a firmware fault)."
        ),
    )
    not_watched = AlertRule(
        alert="GpuXidEventsNotWatched",
        expr=f"{XID_REGISTERED} == 0",
        for_=XID_NOT_WATCHED_FOR,
        severity="info",
        summary="XID errors of a GPU cannot be counted.",
        description=(
            f"NVML does not deliver XID events for {GPU_TEXT} (registration not supported or "
            "failing): the XID alerts are blind for it. See the exporter's log."
        ),
    )
    return RuleGroup("gpu-xid", (hardware, application, storm, not_watched))


def memory_repair_group() -> RuleGroup:
    """Row remaps waiting for a reset, remap failures, pages waiting for retirement."""
    pending = AlertRule(
        alert="GpuRowRemapPending",
        expr=f"{REMAP_PENDING} == 1",
        for_=REMAP_PENDING_FOR,
        severity="warning",
        summary="A GPU needs a reset to remap faulty memory rows.",
        description=(
            f"{GPU_TEXT} has memory rows remapped after ECC errors that take effect only after a "
            "GPU reset. Jobs keep running; reset the GPU at the next convenient moment."
        ),
    )
    failure = AlertRule(
        alert="GpuRowRemapFailed",
        expr=f"{REMAP_FAILURE} == 1",
        for_="0s",
        severity="critical",
        summary="A GPU failed to remap faulty memory rows: it needs replacing.",
        description=(
            f"{GPU_TEXT} reports a failed row remap: a memory bank has no spare rows left, so "
            "further memory errors cannot be repaired. Drain it and contact the vendor (RMA)."
        ),
    )
    retired = AlertRule(
        alert="GpuRetiredPagesPending",
        expr=f"{RETIRED_PENDING} == 1",
        for_=REMAP_PENDING_FOR,
        severity="warning",
        summary="A GPU needs a reset to retire faulty memory pages.",
        description=(
            f"{GPU_TEXT} has memory pages waiting for retirement after ECC errors; they are "
            "retired at the next GPU reset or reboot."
        ),
    )
    return RuleGroup("gpu-memory-repair", (pending, failure, retired))
