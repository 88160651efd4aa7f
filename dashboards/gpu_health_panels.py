"""Panels for GPU health (XIDs, memory repair) and MIG instances, shared by the dashboards.

The node dashboard shows them per GPU; the fleet overview counts GPUs in trouble.
"""

from __future__ import annotations

from dashboards import xids
from dashboards.fleet import COUNT_BAD, COUNT_WARN
from dashboards.panels import (
    Column,
    Layout,
    query,
    stat_panel,
    steps,
    table_panel,
    timeseries_panel,
)
from dashboards.promql import count_or_zero

XID_ERRORS = "gpu_xid_errors_total"
LAST_XID = "gpu_last_xid_timestamp_seconds"
XID_REGISTERED = "gpu_xid_events_registered"
HEALTH_EVENTS = "gpu_health_events_total"
REMAPPED_ROWS = "gpu_remapped_rows_total"
REMAP_PENDING = "gpu_remapped_rows_pending"
REMAP_FAILURE = "gpu_remapped_rows_failure"
ECC_AGGREGATE = "gpu_ecc_aggregate_errors_total"
MIG_INFO = "gpu_mig_instance_info"
MIG_MEMORY_USED = "gpu_mig_memory_used_bytes"
MIG_MEMORY_TOTAL = "gpu_mig_memory_total_bytes"
MIG_PROCESSES = "gpu_mig_processes"
G = "GPU {{gpu}}"


def _sel(name: str, matchers: str) -> str:
    return f"{name}{{{matchers}}}"


def hw_matchers(matchers: str) -> str:
    """``matchers`` plus the XID codes that mean a hardware fault or data loss."""
    return f'{matchers}, xid=~"{xids.regex(xids.XidClass.HARDWARE)}"'


def fleet_health_stats(grid: Layout, matchers: str) -> None:
    """Stats for the fleet overview: GPUs with hardware XIDs, pending remaps, remap failures."""
    grid.add(stat_panel(
        "GPUs with hardware XIDs (24h)", "GPUs that reported an XID meaning a hardware fault or "
        "data loss in the last 24 hours (alert GpuXidHardwareError; see the runbook's XID "
        "table).", "short",
        query(count_or_zero(f"max by (job, instance, gpu) "
                            f"(time() - {_sel(LAST_XID, hw_matchers(matchers))} < 86400)")),
        thresholds=steps(*COUNT_BAD),
    ), 3, 4)
    grid.add(stat_panel(
        "GPUs needing a reset", "GPUs with memory row remaps waiting for a GPU reset (alert "
        "GpuRowRemapPending).", "short",
        query(count_or_zero(f"{_sel(REMAP_PENDING, matchers)} == 1")),
        thresholds=steps(*COUNT_WARN),
    ), 3, 4)
    grid.add(stat_panel(
        "GPUs to replace", "GPUs whose row remapping failed: out of spare memory rows (alert "
        "GpuRowRemapFailed, RMA).", "short",
        query(count_or_zero(f"{_sel(REMAP_FAILURE, matchers)} == 1")),
        thresholds=steps(*COUNT_BAD),
    ), 3, 4)


def node_health_rows(grid: Layout, matchers: str) -> None:
    """The node dashboard's health row: XIDs, events, memory repair, lifetime ECC."""
    grid.row("Health: XID errors and memory repair")
    grid.add(stat_panel(
        "XIDs in range", "XID errors the driver reported on the selected GPUs in the dashboard's "
        "time range (counted by the exporter since it started).", "short",
        query(f"sum(increase({_sel(XID_ERRORS, matchers)}[$__range])) or vector(0)"),
        thresholds=steps(*COUNT_WARN),
    ), 4, 5)
    grid.add(stat_panel(
        "Row remaps pending", "GPUs whose remapped memory rows wait for a GPU reset.", "short",
        query(count_or_zero(f"{_sel(REMAP_PENDING, matchers)} == 1")),
        thresholds=steps(*COUNT_WARN),
    ), 4, 5)
    grid.add(stat_panel(
        "XID events watched", "GPUs on which NVML delivers XID events to the exporter; fewer "
        "than the GPUs means the XID panels are blind there (alert GpuXidEventsNotWatched).",
        "short", query(f"sum({_sel(XID_REGISTERED, matchers)})"),
    ), 4, 5)
    grid.add(table_panel(
        "Last XIDs", "Each XID code seen per GPU (and MIG instance): how many since the exporter "
        "started and when the last one arrived. Class and action per code: the runbook's XID "
        "table.",
        [Column("Count", f"sum without () ({_sel(XID_ERRORS, matchers)})", "short"),
         Column("Last", f"max without (gpu_instance, compute_instance) "
                f"({_sel(LAST_XID, matchers)}) * 1000", "dateTimeAsIso")],
        hidden=("Time", "__name__", "job", "instance", "uuid"), sort_by="Last",
    ), 12, 5)
    grid.add(timeseries_panel(
        "XID errors", "New XIDs per interval, by GPU and code. 13, 31, 43: the application's "
        "fault; 48, 63, 64, 94, 95: memory; 74: NVLink; 79: fell off the bus; 119, 120: GPU "
        "firmware.", "short",
        [query(f"sum by (gpu, xid) (increase({_sel(XID_ERRORS, matchers)}[$__rate_interval]))",
               f"{G} XID {{{{xid}}}}")],
        min_val=0,
    ), 12)
    grid.add(timeseries_panel(
        "Remapped rows and lifetime ECC", "Memory rows remapped after correctable / "
        "uncorrectable errors, and ECC errors over the GPU's lifetime (both persist across "
        "reboots).", "short",
        [query(_sel(REMAPPED_ROWS, matchers), f"{G} remapped {{{{type}}}}"),
         query(_sel(ECC_AGGREGATE, matchers), f"{G} ECC {{{{type}}}} (lifetime)", ref="B")],
        min_val=0,
    ), 12)
    grid.add(timeseries_panel(
        "Health events", "Other NVML health events per interval: double-bit ECC, DRAM "
        "retirement and its failures, poison errors, GPU unavailable, recovery actions, MIG "
        "reconfigurations.", "short",
        [query(f"sum by (gpu, event) (increase({_sel(HEALTH_EVENTS, matchers)}"
               "[$__rate_interval]))", f"{G} {{{{event}}}}")],
        min_val=0,
    ), 12)


def node_mig_rows(grid: Layout, matchers: str) -> None:
    """The node dashboard's MIG row: each instance's profile, memory and processes."""
    grid.row("MIG instances")
    grid.add(table_panel(
        "MIG instances", "Each MIG GPU instance (GPU_I_ID) and compute instance on the selected "
        "GPUs: profile, memory of the GPU instance (shared by its compute instances) and "
        "processes. Utilisation per instance is not available from NVML and not shown.",
        [Column("Memory used", f"sum without () ({_sel(MIG_MEMORY_USED, matchers)}) "
                f"* on (job, instance, uuid, gpu_instance) group_left (compute_instance, "
                f"mig_uuid) {_sel(MIG_INFO, matchers)}", "bytes"),
         Column("Memory total", f"sum without () ({_sel(MIG_MEMORY_TOTAL, matchers)}) "
                f"* on (job, instance, uuid, gpu_instance) group_left (compute_instance, "
                f"mig_uuid) {_sel(MIG_INFO, matchers)}", "bytes"),
         Column("Processes", f"sum without () ({_sel(MIG_PROCESSES, matchers)}) "
                f"* on (job, instance, uuid, gpu_instance, compute_instance) group_left "
                f"(gpu_profile, mig_uuid) {_sel(MIG_INFO, matchers)}", "short")],
        hidden=("Time", "__name__", "job", "instance", "uuid"), sort_by="Memory used",
    ), 24, 7)
    grid.add(timeseries_panel(
        "MIG instance memory used", "Memory used per GPU instance against its size.", "bytes",
        [query(_sel(MIG_MEMORY_USED, matchers), f"{G} GI {{{{gpu_instance}}}} "
               "{{gpu_profile}} used"),
         query(_sel(MIG_MEMORY_TOTAL, matchers), f"{G} GI {{{{gpu_instance}}}} "
               "{{gpu_profile}} total", ref="B")],
        min_val=0,
    ), 24)
