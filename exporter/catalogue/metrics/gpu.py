"""Per-GPU metric rows. Order here is exposition and documentation order.

To add a per-GPU metric whose NVML call exists: add a row here (see docs/adding-a-metric.md).
"""

from __future__ import annotations

from exporter.catalogue.metrics.core import (
    GPU_LABELS,
    Constant,
    Group,
    Kind,
    Metric,
    NvmlSpecial,
    Scope,
    Since,
    nvml,
)

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

_TEMPERATURE_GPU = Constant("NVML_TEMPERATURE_GPU", 0)


def _memory_row(field: str, help_text: str, *, charted: bool = True) -> Metric:
    """``gpu_<field>``: one figure of NVML's memory info, in bytes (JSON field ``field``)."""
    return Metric(
        f"gpu_{field}", Kind.GAUGE, Group.MEMORY, help_text,
        nvml=NvmlSpecial("memory"),
        json_field=field, json_type=int,
        charted=charted,
    )


GPU_INFO = Metric(
    "gpu_info", Kind.INFO, Group.INFO,
    "Static facts about a GPU; value is always 1. Join on uuid to add the model name to a series.",
    labels=(*GPU_LABELS, "name", "pci_bus_id", "driver_version", "cuda_driver_version",
            "hostname"),
    scope=Scope.GPU_STATUS,
)
GPU_UP = Metric(
    "gpu_up", Kind.GAUGE, Group.INFO,
    "1 if the GPU answered the last collection, 0 if it is lost or errored (other GPUs still "
    "report).",
    scope=Scope.GPU_STATUS,
)
MEMORY_TOTAL = _memory_row(
    "memory_total_bytes",
    "Total GPU memory (framebuffer) in bytes, as NVML reports it (ECC on reduces it).",
)
MEMORY_USED = _memory_row(
    "memory_used_bytes",
    "GPU memory allocated on the device in bytes: every process's contexts and caches. "
    "This is the number nvidia-smi shows as used.",
)
MEMORY_FREE = _memory_row(
    "memory_free_bytes",
    "GPU memory not allocated, in bytes.",
    charted=False,
)
MEMORY_RESERVED = _memory_row(
    "memory_reserved_bytes",
    "GPU memory reserved by the driver and firmware, in bytes (only where NVML's memory info v2 "
    "exists).",
    charted=False,
)
BAR1_TOTAL = Metric(
    "gpu_memory_bar1_total_bytes", Kind.GAUGE, Group.BAR1,
    "Size of the BAR1 aperture in bytes: the window of GPU memory the CPU and peers (RDMA, "
    "GPUDirect) can map.",
    nvml=nvml("nvmlDeviceGetBAR1MemoryInfo", attribute="bar1Total"),
    json_field="memory_bar1_total_bytes", json_type=int,
    charted=False,
)
BAR1_USED = Metric(
    "gpu_memory_bar1_used_bytes", Kind.GAUGE, Group.BAR1,
    "BAR1 memory in use, in bytes: GPU memory currently mapped for CPU and peer (RDMA, "
    "GPUDirect) access (opt-in: ~0.4 ms per GPU per collection).",
    nvml=nvml("nvmlDeviceGetBAR1MemoryInfo", attribute="bar1Used"),
    json_field="memory_bar1_used_bytes", json_type=int,
    charted=False,
)
UTILIZATION = Metric(
    "gpu_utilization_ratio", Kind.GAUGE, Group.UTILIZATION,
    "Fraction of the last sample period (1/6 s to 1 s) in which one or more kernels ran on the "
    "GPU (0-1). Not a measure of how many SMs were busy.",
    nvml=nvml("nvmlDeviceGetUtilizationRates", attribute="gpu", divisor=100.0),
    json_field="utilization_ratio",
)
MEMORY_UTILIZATION = Metric(
    "gpu_memory_utilization_ratio", Kind.GAUGE, Group.UTILIZATION,
    "Fraction of the last sample period in which device memory was being read or written (0-1): "
    "memory bandwidth busy, not memory capacity used.",
    nvml=nvml("nvmlDeviceGetUtilizationRates", attribute="memory", divisor=100.0),
    json_field="memory_utilization_ratio",
)
TEMPERATURE = Metric(
    "gpu_temperature_celsius", Kind.GAUGE, Group.TEMPERATURE,
    "GPU core temperature in degrees Celsius. Above 80 degrees, check cooling.",
    nvml=nvml("nvmlDeviceGetTemperatureV", _TEMPERATURE_GPU,
              fallback=("nvmlDeviceGetTemperature",)),
    json_field="temperature_celsius",
)
POWER_USAGE = Metric(
    "gpu_power_usage_watts", Kind.GAUGE, Group.POWER,
    "Power drawn by the GPU board in watts. Power that never rises while processes hold the GPU "
    "hints at a CPU or input-pipeline bottleneck.",
    nvml=nvml("nvmlDeviceGetPowerUsage", divisor=1000.0),
    json_field="power_usage_watts",
)
POWER_LIMIT = Metric(
    "gpu_power_limit_watts", Kind.GAUGE, Group.POWER,
    "Power limit the driver currently enforces, in watts.",
    nvml=nvml("nvmlDeviceGetEnforcedPowerLimit", divisor=1000.0),
    json_field="power_limit_watts",
)
ENERGY = Metric(
    "gpu_energy_consumed_joules_total", Kind.COUNTER, Group.ENERGY,
    "Energy the GPU consumed since the driver loaded, in joules (opt-in: ~3 ms per GPU per "
    "collection).",
    nvml=nvml("nvmlDeviceGetTotalEnergyConsumption", divisor=1000.0),
    json_field="energy_joules",
    charted=False, since=Since.DRIVER,
)
PCIE_THROUGHPUT = Metric(
    "gpu_pcie_throughput_bytes_per_second", Kind.GAUGE, Group.PCIE,
    "PCIe throughput over a 20 ms window in bytes per second; direction is rx (into the GPU) or "
    "tx (opt-in: ~21 ms per GPU per collection).",
    labels=(*GPU_LABELS, "direction"), label_values=("rx", "tx"),
    # NVML answers KB/s (KiB, as nvidia-smi's MB/s in dmon are MiB).
    nvml=nvml("nvmlDeviceGetPcieThroughput", scale=1024.0, per_label={
        "rx": (Constant("NVML_PCIE_UTIL_RX_BYTES", 1),),
        "tx": (Constant("NVML_PCIE_UTIL_TX_BYTES", 0),),
    }),
    json_field="pcie_{}_bytes_per_second",
    charted=False,
)
FAN_SPEED = Metric(
    "gpu_fan_speed_ratio", Kind.GAUGE, Group.FAN,
    "Fan speed as a fraction of its maximum (0-1); absent on passively cooled GPUs.",
    nvml=nvml("nvmlDeviceGetFanSpeed", divisor=100.0),
    json_field="fan_speed_ratio",
    charted=False,
)
SM_CLOCK = Metric(
    "gpu_sm_clock_hertz", Kind.GAUGE, Group.CLOCKS,
    "Current streaming-multiprocessor clock in hertz.",
    nvml=nvml("nvmlDeviceGetClockInfo", Constant("NVML_CLOCK_SM", 1), scale=1e6),
    json_field="sm_clock_hertz",
)
MEMORY_CLOCK = Metric(
    "gpu_memory_clock_hertz", Kind.GAUGE, Group.CLOCKS,
    "Current memory clock in hertz.",
    nvml=nvml("nvmlDeviceGetClockInfo", Constant("NVML_CLOCK_MEM", 2), scale=1e6),
    json_field="memory_clock_hertz",
)
GRAPHICS_CLOCK = Metric(
    "gpu_graphics_clock_hertz", Kind.GAUGE, Group.CLOCKS,
    "Current graphics clock in hertz.",
    nvml=nvml("nvmlDeviceGetClockInfo", Constant("NVML_CLOCK_GRAPHICS", 0), scale=1e6),
    json_field="graphics_clock_hertz",
)
PERFORMANCE_STATE = Metric(
    "gpu_performance_state", Kind.GAUGE, Group.CLOCKS,
    "Performance state: 0 is maximum performance, 15 minimum. An idle GPU sits at P8 or below.",
    nvml=nvml("nvmlDeviceGetPerformanceState", valid=(0, 15)),  # 32 means "unknown"
    json_field="performance_state", json_type=int,
)
THROTTLE_ACTIVE = Metric(
    "gpu_throttle_reason_active", Kind.GAUGE, Group.THROTTLE,
    "1 while the driver reports this clock event (throttle) reason active, else 0. Thermal and "
    "power reasons mean the GPU runs slower than it could.",
    labels=(*GPU_LABELS, "reason"), label_values=THROTTLE_REASONS,
    nvml=NvmlSpecial("throttle"),
    json_field="throttle_reasons", json_type=bool,
)


def ecc_row(name: str, help_text: str, json_field: str, since: Since) -> Metric:
    """ECC errors by type from ``nvmlDeviceGetTotalEccErrors`` (volatile: since the driver
    loaded; aggregate: the GPU's lifetime), both rows read by the special reader ``ecc``."""
    return Metric(
        name, Kind.COUNTER, Group.ECC, help_text,
        labels=(*GPU_LABELS, "type"), label_values=("corrected", "uncorrected"),
        nvml=NvmlSpecial("ecc"),
        json_field=json_field, json_type=int, since=since,
    )


ECC_ERRORS = ecc_row(
    "gpu_ecc_errors_total",
    "ECC memory errors since the driver loaded; type is corrected or uncorrected. Any "
    "uncorrected error means data loss: drain the GPU.",
    "ecc", Since.DRIVER,
)
