"""What the GPU really does: SM, tensor-pipe, DRAM and link activity from NVML's GPM.

``gpu_utilization_ratio`` is NVML's "a kernel was running" bit: it reads 100 % for a kernel
that keeps one SM busy. GPM (GPU Performance Monitoring, Hopper and newer) counts what the
SMs, pipes and memory did over the window between two samples; the exporter keeps the previous
sample of each GPU (and MIG GPU instance) and reports the window since it. These are the
figures dcgm-exporter reports as ``DCGM_FI_PROF_*``; each row's help names its field, and
docs/gpu-activity.md maps them all.

Group ``gpm`` is on by default (~0.25 ms per GPU and collection on an H200);
``gpm_engine`` holds the graphics-engine metric, which costs ~1.5 ms per GPU on its own.
GPUs without GPM (before Hopper) have none of these series; ``gpu_exporter_gpm_status`` says
why. ``exporter.snapshot.gpu_activity`` is what accounting and the landing page read as "is the
GPU working": SM activity where GPM reports it, utilisation elsewhere.
"""

from __future__ import annotations

from exporter.catalogue.metrics.core import (
    GPU_LABELS,
    Constant,
    GpmField,
    Group,
    Kind,
    Metric,
    NvmlGpm,
    Scope,
)
from exporter.catalogue.metrics.health import MIG_INSTANCE_LABELS

#: Why a GPU has (or lacks) GPM series: ``status`` label values of ``gpu_exporter_gpm_status``.
GPM_STATUSES: tuple[str, ...] = (
    "ok",  # sampling; the first collection only opens the window
    "not_supported",  # the GPU has no GPM (before Hopper) or NVML refuses it
    "binding_too_old",  # the installed nvidia-ml-py has no GPM functions
    "no_permission",  # NVML refused the sample (some virtualised setups); asked again later
    "in_use",  # another profiler holds the counters; asked again later
    "error",  # any other failure; asked again later
)
TENSOR_PIPES: tuple[str, ...] = ("hmma", "imma", "dfma", "dmma")
PIPES: tuple[str, ...] = ("fp64", "fp32", "fp16", "integer")
_MIB = 1 << 20


def _gpm(name: str, metric_id: int) -> Constant:
    return Constant(f"NVML_GPM_METRIC_{name}", metric_id)


def _dcgm_note(fields: tuple[GpmField, ...]) -> str:
    """The help text's last sentence: the dcgm-exporter fields the row matches."""
    named = [f"{f.dcgm} ({f.label})" if f.label else f.dcgm for f in fields if f.dcgm]
    if not named:
        return ""
    return " dcgm-exporter: " + ", ".join(named) + "."


def _activity(stem: str, help_text: str, fields: tuple[GpmField, ...], *,
              label: str | None = None, group: Group = Group.GPM, scale: float = 0.01,
              nvlink: bool = False, json_field: str | None = None, charted: bool = True) -> Metric:
    """``gpu_<stem>``: one GPM figure per GPU (per value of ``label``, when it has one)."""
    values = tuple(f.label for f in fields if f.label is not None)
    return Metric(
        f"gpu_{stem}", Kind.GAUGE, group, help_text + _dcgm_note(fields),
        labels=(*GPU_LABELS, label) if label else GPU_LABELS, label_values=values,
        nvml=NvmlGpm(fields, scale, nvlink),
        json_field=json_field if json_field is not None else stem,
        charted=charted,
    )


def per_instance(row: Metric) -> Metric:
    """The MIG variant of a GPM row: ``gpu_mig_<stem>`` per MIG GPU instance, read with
    ``nvmlGpmMigSampleGet`` (stored in ``MigDevice.activity`` under the row's name)."""
    extra = row.labels[len(GPU_LABELS):]
    return Metric(
        "gpu_mig_" + row.name.removeprefix("gpu_"), row.kind, row.group,
        "Per MIG GPU instance: " + row.help[0].lower() + row.help[1:],
        labels=(*MIG_INSTANCE_LABELS, *extra), scope=Scope.MIG, label_values=row.label_values,
        charted=row is SM_ACTIVE,
    )


GRAPHICS_ACTIVE = _activity(
    "graphics_engine_active_ratio",
    "Fraction of the collection interval in which the graphics or compute engine was busy "
    "(0-1), from GPM; close to gpu_utilization_ratio, and available per MIG instance (opt-in: "
    "~1.5 ms per GPU per collection).",
    (GpmField(_gpm("GRAPHICS_UTIL", 1), "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),),
    group=Group.GPM_ENGINE, charted=False,
)
SM_ACTIVE = _activity(
    "sm_active_ratio",
    "Fraction of the collection interval the SMs were busy, averaged over all SMs (0-1), from "
    "GPM: 1 means every SM had work all the time. Unlike gpu_utilization_ratio (any kernel "
    "running), a kernel that keeps one SM busy reads near 0 here.",
    (GpmField(_gpm("SM_UTIL", 2), "DCGM_FI_PROF_SM_ACTIVE"),),
)
SM_OCCUPANCY = _activity(
    "sm_occupancy_ratio",
    "Warps resident on the SMs as a fraction of the maximum the SMs can hold, over the "
    "collection interval (0-1), from GPM. Large matrix products run at 0.1-0.2; memory-bound "
    "kernels higher.",
    (GpmField(_gpm("SM_OCCUPANCY", 3), "DCGM_FI_PROF_SM_OCCUPANCY"),),
)
TENSOR_ACTIVE = _activity(
    "tensor_active_ratio",
    "Fraction of the collection interval the tensor-core pipes were busy, any precision (0-1), "
    "from GPM. Near 0 in a training job means its matrix products run without tensor cores "
    "(FP32 without TF32 or mixed precision).",
    (GpmField(_gpm("ANY_TENSOR_UTIL", 5), "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),),
)
TENSOR_PIPE_ACTIVE = _activity(
    "tensor_pipe_active_ratio",
    "Fraction of the collection interval one kind of tensor-core pipe was busy (0-1), from GPM; "
    "pipe is hmma (FP16, BF16, TF32, FP8), imma (integer), dfma or dmma (FP64).",
    (GpmField(_gpm("HMMA_TENSOR_UTIL", 7), "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE", "hmma"),
     GpmField(_gpm("IMMA_TENSOR_UTIL", 9), "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE", "imma"),
     GpmField(_gpm("DFMA_TENSOR_UTIL", 6), "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE", "dfma"),
     GpmField(_gpm("DMMA_TENSOR_UTIL", 8), None, "dmma")),
    label="pipe", json_field="tensor_{}_active_ratio",
)
DRAM_ACTIVE = _activity(
    "dram_active_ratio",
    "Device-memory bandwidth used over the collection interval as a fraction of the GPU's peak "
    "(0-1), from GPM. High DRAM with low SM activity: the job is memory-bound.",
    (GpmField(_gpm("DRAM_BW_UTIL", 10), "DCGM_FI_PROF_DRAM_ACTIVE"),),
)
PIPE_ACTIVE = _activity(
    "pipe_active_ratio",
    "Fraction of the collection interval the SMs' non-tensor arithmetic pipes of one kind were "
    "busy (0-1), from GPM; pipe is fp64, fp32, fp16 or integer.",
    (GpmField(_gpm("FP64_UTIL", 11), "DCGM_FI_PROF_PIPE_FP64_ACTIVE", "fp64"),
     GpmField(_gpm("FP32_UTIL", 12), "DCGM_FI_PROF_PIPE_FP32_ACTIVE", "fp32"),
     GpmField(_gpm("FP16_UTIL", 13), "DCGM_FI_PROF_PIPE_FP16_ACTIVE", "fp16"),
     GpmField(_gpm("INTEGER_UTIL", 4), "DCGM_FI_PROF_PIPE_INT_ACTIVE", "integer")),
    label="pipe", json_field="{}_pipe_active_ratio",
)
PCIE_TRAFFIC = _activity(
    "pcie_traffic_bytes_per_second",
    "PCIe traffic averaged over the collection interval in bytes per second, from GPM; "
    "direction is rx (into the GPU) or tx. The cheap, interval-wide counterpart of "
    "gpu_pcie_throughput_bytes_per_second (a 20 ms window).",
    (GpmField(_gpm("PCIE_RX_PER_SEC", 21), "DCGM_FI_PROF_PCIE_RX_BYTES", "rx"),
     GpmField(_gpm("PCIE_TX_PER_SEC", 20), "DCGM_FI_PROF_PCIE_TX_BYTES", "tx")),
    label="direction", scale=_MIB,
    json_field="pcie_{}_traffic_bytes_per_second",
)
NVLINK_TRAFFIC = _activity(
    "nvlink_traffic_bytes_per_second",
    "NVLink traffic of all links averaged over the collection interval in bytes per second, "
    "from GPM; direction is rx or tx. Absent on GPUs without NVLink.",
    (GpmField(_gpm("NVLINK_TOTAL_RX_PER_SEC", 60), "DCGM_FI_PROF_NVLINK_RX_BYTES", "rx"),
     GpmField(_gpm("NVLINK_TOTAL_TX_PER_SEC", 61), "DCGM_FI_PROF_NVLINK_TX_BYTES", "tx")),
    label="direction", scale=_MIB, nvlink=True,
    json_field="nvlink_{}_traffic_bytes_per_second",
)
GPM_STATUS = Metric(
    "gpu_exporter_gpm_status", Kind.GAUGE, Group.GPM,
    "Whether the exporter reads GPM activity (SM, tensor, DRAM) of this GPU, as a label: ok, "
    "not_supported (GPUs before Hopper), binding_too_old, no_permission, in_use (another "
    "profiler holds the counters) or error; value is always 1. Alerts fall back to utilisation "
    "where GPM is missing.",
    labels=(*GPU_LABELS, "status"), label_values=GPM_STATUSES,
    nvml=NvmlGpm(()),
    json_field="gpm_status", charted=False,
)

MIG_GRAPHICS_ACTIVE = per_instance(GRAPHICS_ACTIVE)
MIG_SM_ACTIVE = per_instance(SM_ACTIVE)
MIG_SM_OCCUPANCY = per_instance(SM_OCCUPANCY)
MIG_TENSOR_ACTIVE = per_instance(TENSOR_ACTIVE)
MIG_TENSOR_PIPE_ACTIVE = per_instance(TENSOR_PIPE_ACTIVE)
MIG_DRAM_ACTIVE = per_instance(DRAM_ACTIVE)
MIG_PIPE_ACTIVE = per_instance(PIPE_ACTIVE)
#: The per-GPU activity rows, in documentation order (the status row aside; docs/gpu-activity.md
#: maps them to dcgm-exporter's fields).
GPU_ACTIVITY_ROWS: tuple[Metric, ...] = (
    GRAPHICS_ACTIVE, SM_ACTIVE, SM_OCCUPANCY, TENSOR_ACTIVE, TENSOR_PIPE_ACTIVE, DRAM_ACTIVE,
    PIPE_ACTIVE, PCIE_TRAFFIC, NVLINK_TRAFFIC)
#: (per-GPU row, its per-MIG-instance row): the rows GPM reads per MIG GPU instance.
PER_INSTANCE: tuple[tuple[Metric, Metric], ...] = (
    (GRAPHICS_ACTIVE, MIG_GRAPHICS_ACTIVE), (SM_ACTIVE, MIG_SM_ACTIVE),
    (SM_OCCUPANCY, MIG_SM_OCCUPANCY), (TENSOR_ACTIVE, MIG_TENSOR_ACTIVE),
    (TENSOR_PIPE_ACTIVE, MIG_TENSOR_PIPE_ACTIVE), (DRAM_ACTIVE, MIG_DRAM_ACTIVE),
    (PIPE_ACTIVE, MIG_PIPE_ACTIVE),
)

