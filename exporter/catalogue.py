"""The one catalogue of every metric gpu-exporter exposes.

The Prometheus collector, the README's metric table and the Grafana dashboards all read the
names, types, labels and help texts from here: a name is typed once, in this file.

Run ``python -m exporter.catalogue`` to print the Markdown table used in the README.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Kind(str, Enum):
    GAUGE = "gauge"
    COUNTER = "counter"
    INFO = "info"


class Group(str, Enum):
    """Collector groups, each switched with ``--collector.<group>`` / ``--no-collector.<group>``."""

    INFO = "info"
    MEMORY = "memory"
    UTILIZATION = "utilization"
    TEMPERATURE = "temperature"
    POWER = "power"
    ENERGY = "energy"
    PCIE = "pcie"
    FAN = "fan"
    CLOCKS = "clocks"
    THROTTLE = "throttle"
    ECC = "ecc"
    PROCESSES = "processes"
    PROCESS_UTILIZATION = "process_utilization"
    EXPORTER = "exporter"  # self-metrics, always on


#: Groups that cost milliseconds per GPU and are therefore off unless asked for.
OPT_IN_GROUPS: frozenset[Group] = frozenset({Group.ENERGY, Group.PCIE})

PREFIX = "gpu_"
SELF_PREFIX = "gpu_exporter_"

#: Labels on every per-GPU series.
GPU_LABELS: tuple[str, ...] = ("gpu", "uuid")
#: Labels of per-process series (``pid`` can be switched off; pod labels only on Kubernetes).
PROCESS_LABELS: tuple[str, ...] = (*GPU_LABELS, "pid", "process", "user", "uid")
KUBERNETES_LABELS: tuple[str, ...] = ("namespace", "pod", "container")
#: Label value used for processes folded into the overflow series when the per-GPU cap is hit,
#: and for processes whose owner could not be resolved.
OVERFLOW_VALUE = "__overflow__"
UNKNOWN_VALUE = "unknown"

#: Clock event (throttle) reasons, in the snake_case the ``reason`` label carries.
THROTTLE_REASONS: tuple[str, ...] = (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
)
#: Reasons that mean the GPU is being slowed for heat or power (alerts and dashboards use these).
THERMAL_THROTTLE_REASONS: tuple[str, ...] = ("sw_thermal_slowdown", "hw_thermal_slowdown")
POWER_THROTTLE_REASONS: tuple[str, ...] = ("sw_power_cap", "hw_power_brake_slowdown", "hw_slowdown")

#: Base units a metric name may end in (longest first, so bytes_per_second wins over seconds).
UNITS: tuple[str, ...] = ("bytes_per_second", "bytes", "celsius", "watts", "joules", "ratio",
                          "hertz", "seconds")


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric family.

    ``name`` is the full exposed name (for info metrics including ``_info``; for counters
    including ``_total``). ``labels`` lists the label names in exposition order; per-process
    metrics may add ``KUBERNETES_LABELS`` and drop ``pid`` according to configuration.
    """

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...]
    group: Group

    @property
    def unit(self) -> str:
        """The OpenMetrics unit: the base-unit suffix of the name ("" for unitless counts)."""
        stem = self.name.removesuffix("_total")
        return next((u for u in UNITS if stem.endswith("_" + u)), "")

    @property
    def family_name(self) -> str:
        """The name to pass to prometheus_client families (which add ``_info``/``_total``)."""
        if self.kind is Kind.INFO:
            return self.name.removesuffix("_info")
        if self.kind is Kind.COUNTER:
            return self.name.removesuffix("_total")
        return self.name


def _m(name: str, kind: Kind, group: Group, labels: tuple[str, ...], help_text: str) -> Metric:
    return Metric(name=name, kind=kind, help=help_text, labels=labels, group=group)


G, C, I = Kind.GAUGE, Kind.COUNTER, Kind.INFO  # noqa: E741

# --- per GPU -------------------------------------------------------------------------------
GPU_INFO = _m(
    "gpu_info", I, Group.INFO,
    (*GPU_LABELS, "name", "pci_bus_id", "driver_version", "cuda_driver_version", "hostname"),
    "Static facts about a GPU; value is always 1. Join on uuid to add the model name to a series.",
)
GPU_UP = _m(
    "gpu_up", G, Group.INFO, GPU_LABELS,
    "1 if the GPU answered the last collection, 0 if it is lost or errored (other GPUs still "
    "report).",
)
MEMORY_TOTAL = _m(
    "gpu_memory_total_bytes", G, Group.MEMORY, GPU_LABELS,
    "Total GPU memory (framebuffer) in bytes, as NVML reports it (ECC on reduces it).",
)
MEMORY_USED = _m(
    "gpu_memory_used_bytes", G, Group.MEMORY, GPU_LABELS,
    "GPU memory allocated on the device in bytes: every process's contexts and caches. "
    "This is the number nvidia-smi shows as used.",
)
MEMORY_FREE = _m(
    "gpu_memory_free_bytes", G, Group.MEMORY, GPU_LABELS,
    "GPU memory not allocated, in bytes.",
)
MEMORY_RESERVED = _m(
    "gpu_memory_reserved_bytes", G, Group.MEMORY, GPU_LABELS,
    "GPU memory reserved by the driver and firmware, in bytes (only where NVML's memory info v2 "
    "exists).",
)
UTILIZATION = _m(
    "gpu_utilization_ratio", G, Group.UTILIZATION, GPU_LABELS,
    "Fraction of the last sample period (1/6 s to 1 s) in which one or more kernels ran on the "
    "GPU (0-1). Not a measure of how many SMs were busy.",
)
MEMORY_UTILIZATION = _m(
    "gpu_memory_utilization_ratio", G, Group.UTILIZATION, GPU_LABELS,
    "Fraction of the last sample period in which device memory was being read or written (0-1): "
    "memory bandwidth busy, not memory capacity used.",
)
TEMPERATURE = _m(
    "gpu_temperature_celsius", G, Group.TEMPERATURE, GPU_LABELS,
    "GPU core temperature in degrees Celsius. Above 80 degrees, check cooling.",
)
POWER_USAGE = _m(
    "gpu_power_usage_watts", G, Group.POWER, GPU_LABELS,
    "Power drawn by the GPU board in watts. Power that never rises while processes hold the GPU "
    "hints at a CPU or input-pipeline bottleneck.",
)
POWER_LIMIT = _m(
    "gpu_power_limit_watts", G, Group.POWER, GPU_LABELS,
    "Power limit the driver currently enforces, in watts.",
)
ENERGY = _m(
    "gpu_energy_consumed_joules_total", C, Group.ENERGY, GPU_LABELS,
    "Energy the GPU consumed since the driver loaded, in joules (opt-in: ~3 ms per GPU per "
    "collection).",
)
PCIE_THROUGHPUT = _m(
    "gpu_pcie_throughput_bytes_per_second", G, Group.PCIE, (*GPU_LABELS, "direction"),
    "PCIe throughput over a 20 ms window in bytes per second; direction is rx (into the GPU) or "
    "tx (opt-in: ~21 ms per GPU per collection).",
)
FAN_SPEED = _m(
    "gpu_fan_speed_ratio", G, Group.FAN, GPU_LABELS,
    "Fan speed as a fraction of its maximum (0-1); absent on passively cooled GPUs.",
)
SM_CLOCK = _m(
    "gpu_sm_clock_hertz", G, Group.CLOCKS, GPU_LABELS,
    "Current streaming-multiprocessor clock in hertz.",
)
MEMORY_CLOCK = _m(
    "gpu_memory_clock_hertz", G, Group.CLOCKS, GPU_LABELS,
    "Current memory clock in hertz.",
)
GRAPHICS_CLOCK = _m(
    "gpu_graphics_clock_hertz", G, Group.CLOCKS, GPU_LABELS,
    "Current graphics clock in hertz.",
)
PERFORMANCE_STATE = _m(
    "gpu_performance_state", G, Group.CLOCKS, GPU_LABELS,
    "Performance state: 0 is maximum performance, 15 minimum. An idle GPU sits at P8 or below.",
)
THROTTLE_ACTIVE = _m(
    "gpu_throttle_reason_active", G, Group.THROTTLE, (*GPU_LABELS, "reason"),
    "1 while the driver reports this clock event (throttle) reason active, else 0. Thermal and "
    "power reasons mean the GPU runs slower than it could.",
)
ECC_ERRORS = _m(
    "gpu_ecc_errors_total", C, Group.ECC, (*GPU_LABELS, "type"),
    "ECC memory errors since the driver loaded; type is corrected or uncorrected. Any "
    "uncorrected error means data loss: drain the GPU.",
)
PROCESSES = _m(
    "gpu_processes", G, Group.PROCESSES, GPU_LABELS,
    "Number of processes holding a context on the GPU (0 when idle).",
)

# --- per process and per user --------------------------------------------------------------
PROCESS_MEMORY = _m(
    "gpu_process_memory_used_bytes", G, Group.PROCESSES, PROCESS_LABELS,
    "GPU memory the driver handed to this process, in bytes: CUDA context (a few hundred MiB) "
    "plus the framework's caching-allocator reserve plus tensors. Larger than what PyTorch's "
    "memory_allocated() reports; close to memory_reserved() plus the context.",
)
PROCESS_UTILIZATION = _m(
    "gpu_process_utilization_ratio", G, Group.PROCESS_UTILIZATION, PROCESS_LABELS,
    "Fraction of the last sample period in which this process's kernels ran on the GPU's SMs "
    "(0-1). 0 for a process with no sample since the previous collection.",
)
PROCESS_START_TIME = _m(
    "gpu_process_start_time_seconds", G, Group.PROCESSES, PROCESS_LABELS,
    "Start time of the process since the Unix epoch in seconds; time() minus this is its age.",
)
USER_MEMORY = _m(
    "gpu_user_memory_used_bytes", G, Group.PROCESSES, (*GPU_LABELS, "user"),
    "GPU memory held by all of one user's processes on this GPU, in bytes (stable series for "
    "long-range views; 'unknown' where the owner could not be read).",
)
USER_PROCESSES = _m(
    "gpu_user_processes", G, Group.PROCESSES, (*GPU_LABELS, "user"),
    "Number of one user's processes holding a context on this GPU.",
)

# --- the exporter itself -------------------------------------------------------------------
BUILD_INFO = _m(
    "gpu_exporter_build_info", I, Group.EXPORTER,
    ("version", "python_version", "nvml_binding_version", "source"),
    "Version of gpu-exporter and of what it runs on; value is always 1.",
)
SOURCE_UP = _m(
    "gpu_exporter_source_up", G, Group.EXPORTER, ("source",),
    "1 if the data source (NVML, or the simulator) is initialised and answering, else 0. "
    "With source=\"nvml\" this is NVML up.",
)
COLLECTION_SUCCESS = _m(
    "gpu_exporter_collection_success", G, Group.EXPORTER, (),
    "1 if the last collection read every GPU without error, else 0.",
)
COLLECTION_DURATION = _m(
    "gpu_exporter_collection_duration_seconds", G, Group.EXPORTER, (),
    "How long the last collection took, in seconds.",
)
LAST_SUCCESS = _m(
    "gpu_exporter_last_success_timestamp_seconds", G, Group.EXPORTER, (),
    "Unix time of the last collection that read every GPU, in seconds.",
)
DATA_AGE = _m(
    "gpu_exporter_data_age_seconds", G, Group.EXPORTER, (),
    "Age of the data in this scrape, in seconds. Grows when collections hang or fail and the "
    "last good data is served instead.",
)
ERRORS = _m(
    "gpu_exporter_errors_total", C, Group.EXPORTER, ("kind",),
    "Problems met while collecting, by kind (gpu_lost, nvml_call, garbled_process_entry, "
    "collection_timeout, source_init, owner_lookup, ...).",
)
PROCESS_SERIES_OVERFLOW = _m(
    "gpu_exporter_process_series_overflow", G, Group.EXPORTER, GPU_LABELS,
    "Processes on this GPU folded into the overflow series because the per-GPU series cap was "
    "reached (0 when under the cap).",
)

CATALOGUE: tuple[Metric, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Metric))
BY_NAME: dict[str, Metric] = {m.name: m for m in CATALOGUE}


def markdown_table() -> str:
    """The README's metric table, one row per metric."""
    rows = ["| metric | type | labels | group | meaning |", "|---|---|---|---|---|"]
    for metric in CATALOGUE:
        labels = ", ".join(f"`{label}`" for label in metric.labels) or "-"
        group = metric.group.value + (" (opt-in)" if metric.group in OPT_IN_GROUPS else "")
        rows.append(
            f"| `{metric.name}` | {metric.kind.value} | {labels} | {group} | {metric.help} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
