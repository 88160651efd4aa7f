"""Panels for GPU health (XIDs, memory repair) and MIG instances on the node dashboard (the fleet
overview reads recording rules only). Class and action of each XID code: ``dashboards.xids``
and the runbook."""

from __future__ import annotations

from dashboards.panels import (
    GPU_LEGEND,
    MIG_DEVICE_LEGEND,
    MIG_INSTANCE_LEGEND,
    Column,
    Layout,
    Step,
    query,
    stat_panel,
    steps,
    table_panel,
    timeseries_panel,
)
from dashboards.promql import count_or_zero, sel
from exporter.catalogue import metrics, thresholds

COUNT_WARN: tuple[Step, ...] = (("green", None), ("orange", 1.0))


def node_health_rows(grid: Layout, matchers: str) -> None:
    """The node dashboard's health row: XIDs, NVML events, memory repair, lifetime ECC."""
    grid.row("Health: XID errors and memory repair")
    grid.add(stat_panel(
        "XIDs in range", "XID errors the driver reported on the selected GPUs in the dashboard's "
        "time range (counted by the exporter since it started).", "short",
        query(f"sum(increase({sel(metrics.XID_ERRORS, matchers)}[$__range])) or vector(0)"),
        thresholds=steps(*COUNT_WARN),
    ), 4, 5)
    grid.add(stat_panel(
        "Rows or pages pending a reset", "GPUs whose remapped rows (or, before Ampere, retired "
        "pages) wait for a GPU reset.", "short",
        query(count_or_zero(f"{sel(metrics.REMAP_PENDING, matchers)} == 1 or "
                            f"{sel(metrics.RETIRED_PENDING, matchers)} == 1")),
        thresholds=steps(*COUNT_WARN),
    ), 4, 5)
    grid.add(stat_panel(
        "XID events watched", "GPUs on which NVML delivers XID events to the exporter; fewer "
        "than the GPUs means XIDs go uncounted there (alert GpuXidEventsNotWatched).", "short",
        query(f"sum({sel(metrics.XID_EVENTS_REGISTERED, matchers)})"),
    ), 4, 5)
    grid.add(table_panel(
        "XIDs seen", "Each XID code per GPU since the exporter started: how many, and when the "
        "last one arrived. Class and action per code: the runbook's XID table. Under MIG, "
        "XIDs NVML attributed to an instance are in the MIG rows below.",
        [Column("Count", f"sum without () ({sel(metrics.XID_ERRORS, matchers)})", "short"),
         Column("Last", f"{sel(metrics.LAST_XID, matchers)} * 1000", "dateTimeAsIso")],
        hidden=("Time", "__name__", "job", "instance", "uuid"), sort_by="Last",
    ), 12, 5)
    grid.add(timeseries_panel(
        "XID errors", "New XIDs per interval, by GPU and code. 13, 31, 43: the application's "
        "fault; 48, 63, 64, 94, 95: memory; 74: NVLink; 79: fell off the bus; 119, 120: GPU "
        "firmware.", "short",
        [query("sum by (gpu, xid) "
               f"(increase({sel(metrics.XID_ERRORS, matchers)}[$__rate_interval]))",
               f"{GPU_LEGEND} XID {{{{xid}}}}")],
        min_val=0,
    ), 12)
    grid.add(timeseries_panel(
        "Health events", "Other NVML health events per interval: double-bit ECC, DRAM "
        "retirement and its failures, poison errors, GPU unavailable, recovery actions, MIG "
        "reconfigurations.", "short",
        [query(f"sum by (gpu, event) (increase({sel(metrics.HEALTH_EVENT_COUNT, matchers)}"
               "[$__rate_interval]))", f"{GPU_LEGEND} {{{{event}}}}")],
        min_val=0,
    ), 12)
    grid.add(timeseries_panel(
        "Memory repair", "Rows remapped after correctable / uncorrectable errors (Ampere and "
        "newer) or pages retired (older GPUs), for the life of the GPU; pending: waiting for a "
        f"GPU reset (alert after {thresholds.REMAP_PENDING_FOR}); failure: out of spare rows "
        "(RMA).",
        "short",
        [query(sel(metrics.REMAPPED_ROWS, matchers), f"{GPU_LEGEND} rows remapped ({{{{type}}}})"),
         query(sel(metrics.REMAP_PENDING, matchers), f"{GPU_LEGEND} remap pending"),
         query(sel(metrics.REMAP_FAILURE, matchers), f"{GPU_LEGEND} remap failure"),
         query(sel(metrics.RETIRED_PAGES, matchers), f"{GPU_LEGEND} pages retired ({{{{cause}}}})"),
         query(sel(metrics.RETIRED_PENDING, matchers), f"{GPU_LEGEND} retirement pending")],
        min_val=0,
    ), 12)
    grid.add(timeseries_panel(
        "Lifetime ECC errors", "ECC errors over the GPU's whole life (NVML's aggregate counters, "
        "kept across driver reloads and reboots), next to those since the driver loaded.",
        "short",
        [query(sel(metrics.ECC_AGGREGATE, matchers), f"{GPU_LEGEND} lifetime {{{{type}}}}"),
         query(sel(metrics.ECC_ERRORS, matchers), f"{GPU_LEGEND} since driver load {{{{type}}}}")],
        min_val=0,
    ), 12)


def node_mig_rows(grid: Layout, matchers: str) -> None:
    """The node dashboard's MIG row: each instance's profile, memory, processes and users."""
    # Collapsed: only GPUs in MIG mode have these series.
    grid.row("MIG instances", collapsed=True)
    mig_info = sel(metrics.MIG_INFO, matchers)
    grid.add(table_panel(
        "MIG devices", "Each MIG device on the selected GPUs: GPU instance (dcgm-exporter's "
        "GPU_I_ID), its profile (GPU_I_PROFILE), compute instance, MIG UUID (what "
        "CUDA_VISIBLE_DEVICES and the nvidia.com/mig-* resources name) and processes. NVML "
        "gives no utilisation per instance; none is shown.",
        [Column("Processes", f"sum without () ({sel(metrics.MIG_PROCESSES, matchers)}) * on (job, "
                f"instance, uuid, gpu_instance, compute_instance) group_left (mig_uuid) "
                f"{mig_info}", "short")],
        hidden=("Time", "__name__", "job", "instance", "uuid"), sort_by="Processes",
    ), 12, 7)
    grid.add(table_panel(
        "MIG GPU instances", "Memory of each GPU instance (its compute instances share it).",
        [Column("Memory used", f"sum without () ({sel(metrics.MIG_MEMORY_USED, matchers)})",
                "bytes"),
         Column("Memory total", f"sum without () ({sel(metrics.MIG_MEMORY_TOTAL, matchers)})",
                "bytes")],
        hidden=("Time", "__name__", "job", "instance", "uuid"), sort_by="Memory used",
    ), 12, 7)
    grid.add(timeseries_panel(
        "MIG instance memory", "Memory used per GPU instance against its size.", "bytes",
        [query(sel(metrics.MIG_MEMORY_USED, matchers), f"{MIG_INSTANCE_LEGEND} used"),
         query(sel(metrics.MIG_MEMORY_TOTAL, matchers), f"{MIG_INSTANCE_LEGEND} total")],
        min_val=0,
    ), 12)
    grid.add(timeseries_panel(
        "SM activity per MIG instance", "Share of its SMs each GPU instance kept busy (GPM per "
        "instance, Hopper and newer; NVML has no utilisation under MIG).", "percentunit",
        [query(sel(metrics.MIG_SM_ACTIVE, matchers), MIG_INSTANCE_LEGEND)],
        min_val=0, max_val=1,
    ), 12)
    grid.add(timeseries_panel(
        "MIG memory by user", "GPU memory each user's processes hold in each MIG device "
        "(GPU instance / compute instance), stacked: who fills which instance.", "bytes",
        [query(sel(metrics.MIG_USER_MEMORY, matchers), f"{MIG_DEVICE_LEGEND} {{{{user}}}}")],
        stacked=True, min_val=0,
    ), 12)
    grid.add(timeseries_panel(
        "XIDs by MIG device", "XIDs NVML attributed to one MIG device, per interval: usually the "
        "fault of the job running in it.", "short",
        [query(f"sum by (gpu, gpu_instance, compute_instance, xid) "
               f"(increase({sel(metrics.MIG_XID_ERRORS, matchers)}[$__rate_interval]))",
               f"{MIG_DEVICE_LEGEND} XID {{{{xid}}}}")],
        min_val=0,
    ), 12)
    grid.add(timeseries_panel(
        "MIG mode", "1 while a GPU is in MIG mode (split into GPU instances), 0 while whole; "
        "absent on GPUs without MIG.", "short",
        [query(sel(metrics.MIG_ENABLED, matchers), GPU_LEGEND)], min_val=0, max_val=1,
    ), 24)
