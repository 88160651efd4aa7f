"""GPU health rows: memory repair (group ``remapping``), lifetime ECC, XID errors and NVML health
events (group ``xid``), MIG instances (group ``mig``). See docs/health.md.

MIG labels follow dcgm-exporter's: ``gpu``/``uuid`` stay the parent GPU's, ``gpu_instance`` is
its ``GPU_I_ID``, ``gpu_profile`` its ``GPU_I_PROFILE`` (``1g.18gb``), ``compute_instance`` the
compute instance ID and ``mig_uuid`` the MIG device's UUID.
"""

from __future__ import annotations

from exporter.catalogue.metrics.core import (
    GPU_LABELS,
    Group,
    Kind,
    Metric,
    NvmlSpecial,
    Scope,
    Since,
)
from exporter.catalogue.metrics.gpu import ecc_row

#: NVML health event types counted besides XIDs (``event`` label values), in exposition order.
HEALTH_EVENTS: tuple[str, ...] = (
    "double_bit_ecc",
    "single_bit_ecc_storm",
    "dram_retirement",
    "dram_retirement_failure",
    "non_fatal_poison",
    "fatal_poison",
    "gpu_unavailable",
    "recovery_action",
    "mig_config_change",
)
MIG_INSTANCE_LABELS: tuple[str, ...] = (*GPU_LABELS, "gpu_instance", "gpu_profile")
MIG_DEVICE_LABELS: tuple[str, ...] = (*GPU_LABELS, "gpu_instance", "compute_instance",
                                      "gpu_profile")


def _xid_row(name: str, kind: Kind, help_text: str, labels: tuple[str, ...]) -> Metric:
    """A row filled from the background XID counts (``exporter.exposition.health``)."""
    return Metric(name, kind, Group.XID, help_text, labels=labels, scope=Scope.XID,
                  since=Since.EXPORTER if kind is Kind.COUNTER else None)


def _mig_row(name: str, kind: Kind, help_text: str, labels: tuple[str, ...]) -> Metric:
    """A row per MIG instance or device, filled from the GPU's MIG list."""
    return Metric(name, kind, Group.MIG, help_text, labels=labels, scope=Scope.MIG)


def _remap_flag(flag: str, help_text: str) -> Metric:
    """``gpu_remapped_rows_<flag>``: one 0/1 field of NVML's row-remapping state."""
    return Metric(
        f"gpu_remapped_rows_{flag}", Kind.GAUGE, Group.REMAPPING, help_text,
        nvml=NvmlSpecial("remapped_rows"),
        json_field=f"remapped_rows_{flag}", json_type=bool,
    )


def _repair_counts(special: str, label: str, values: tuple[str, str], help_text: str) -> Metric:
    """``gpu_<special>_total`` by ``label``: the lifetime counts of one memory-repair mechanism,
    one NVML answer."""
    return Metric(
        f"gpu_{special}_total", Kind.COUNTER, Group.REMAPPING, help_text,
        labels=(*GPU_LABELS, label), label_values=values,
        nvml=NvmlSpecial(special),
        json_field=f"{special}_{{}}", json_type=int, since=Since.LIFETIME,
    )


# --- memory repair (Ampere+: row remapping; older: page retirement) -----------------------------
REMAPPED_ROWS = _repair_counts(
    "remapped_rows", "type", ("corrected", "uncorrected"),
    "Memory rows the GPU remapped to spare rows after ECC errors, for the life of the GPU; type "
    "is corrected (after correctable errors) or uncorrected. Ampere and newer; absent with MIG "
    "on.",
)
REMAP_PENDING = _remap_flag(
    "pending",
    "1 while remapped rows wait for a GPU reset to take effect (jobs keep running; reset the "
    "GPU when convenient), else 0.",
)
REMAP_FAILURE = _remap_flag(
    "failure",
    "1 if a row remap ever failed on this GPU (a memory bank ran out of spare rows: replace "
    "the GPU), else 0.",
)
RETIRED_PAGES = _repair_counts(
    "retired_pages", "cause", ("single_bit", "double_bit"),
    "Memory pages retired after ECC errors, for the life of the GPU; cause is single_bit "
    "(multiple single-bit errors) or double_bit. GPUs before Ampere (newer ones remap rows).",
)
RETIRED_PENDING = Metric(
    "gpu_retired_pages_pending", Kind.GAUGE, Group.REMAPPING,
    "1 while retired pages wait for a GPU reset or reboot to be retired, else 0 (GPUs before "
    "Ampere).",
    nvml=NvmlSpecial("retired_pages"),
    json_field="retired_pages_pending", json_type=bool,
)
ECC_AGGREGATE = ecc_row(
    "gpu_ecc_aggregate_errors_total",
    "ECC memory errors over the lifetime of the GPU (NVML's aggregate counters, kept across "
    "driver reloads and reboots); type is corrected or uncorrected.",
    "ecc_aggregate", Since.LIFETIME,
)

# --- XID errors and health events (NVML events, counted in the background) ----------------------
XID_ERRORS = _xid_row(
    "gpu_xid_errors_total", Kind.COUNTER,
    "XID errors the driver reported for this GPU since the exporter started, by XID code "
    "(13, 31, 43: the application's fault; 48, 94, 95: uncorrectable memory errors; 79: fell "
    "off the bus; see the runbook). Counted from NVML events, not on the scrape path.",
    (*GPU_LABELS, "xid"),
)
LAST_XID = _xid_row(
    "gpu_last_xid_timestamp_seconds", Kind.GAUGE,
    "Unix time the exporter received the last XID of this code for this GPU, in seconds.",
    (*GPU_LABELS, "xid"),
)
XID_EVENTS_REGISTERED = Metric(
    "gpu_xid_events_registered", Kind.GAUGE, Group.XID,
    "1 if the exporter receives XID events for this GPU, 0 if NVML refused them (old GPU, some "
    "virtualised or containerised setups): then XIDs of this GPU cannot be counted.",
    nvml=NvmlSpecial("events"),
    json_field="xid_events_registered", json_type=bool,
)
HEALTH_EVENT_COUNT = Metric(
    "gpu_health_events_total", Kind.COUNTER, Group.XID,
    "NVML health events for this GPU since the exporter started, by event (double_bit_ecc, "
    "dram_retirement, dram_retirement_failure, fatal_poison, gpu_unavailable, ...); only the "
    "types the GPU lets the exporter watch are present.",
    labels=(*GPU_LABELS, "event"), label_values=HEALTH_EVENTS,
    nvml=NvmlSpecial("events"),
    json_field="health_events", json_type=int, since=Since.EXPORTER,
)

# --- MIG ----------------------------------------------------------------------------------------
MIG_ENABLED = Metric(
    "gpu_mig_enabled", Kind.GAUGE, Group.MIG,
    "1 if MIG (Multi-Instance GPU) mode is on for this GPU, 0 if off; absent on GPUs without "
    "MIG. With MIG on, utilisation is not available per GPU or per instance.",
    nvml=NvmlSpecial("mig"),
    json_field="mig_enabled", json_type=bool,
)
MIG_INFO = _mig_row(
    "gpu_mig_instance_info", Kind.INFO,
    "One MIG device (a compute instance inside a GPU instance) of this GPU; value is always 1. "
    "gpu_instance and gpu_profile are dcgm-exporter's GPU_I_ID and GPU_I_PROFILE.",
    (*MIG_DEVICE_LABELS, "mig_uuid"),
)
MIG_MEMORY_USED = _mig_row(
    "gpu_mig_memory_used_bytes", Kind.GAUGE,
    "Memory used in one MIG GPU instance, in bytes (its compute instances share it).",
    MIG_INSTANCE_LABELS,
)
MIG_MEMORY_TOTAL = _mig_row(
    "gpu_mig_memory_total_bytes", Kind.GAUGE, "Memory of one MIG GPU instance, in bytes.",
    MIG_INSTANCE_LABELS,
)
MIG_PROCESSES = _mig_row(
    "gpu_mig_processes", Kind.GAUGE,
    "Number of processes running in one MIG device (compute instance).", MIG_DEVICE_LABELS,
)
MIG_USER_MEMORY = _mig_row(
    "gpu_mig_user_memory_used_bytes", Kind.GAUGE,
    "GPU memory held by one user's processes in one MIG device, in bytes ('unknown' where the "
    "owner could not be read).",
    (*MIG_DEVICE_LABELS, "user"),
)
MIG_XID_ERRORS = _xid_row(
    "gpu_mig_xid_errors_total", Kind.COUNTER,
    "XID errors NVML attributed to one MIG device since the exporter started, by XID code (a "
    "subset of gpu_xid_errors_total).",
    (*GPU_LABELS, "gpu_instance", "compute_instance", "xid"),
)
