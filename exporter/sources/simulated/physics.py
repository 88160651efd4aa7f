"""The simulated state of one GPU at one moment: what the simulator's functions of the metric
rows read (``exporter.sources.simulated.rows``)."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.health import RemappedRows, RetiredPages
from exporter.sources.simulated.gpu_models import GpuModel
from exporter.sources.simulated.throttle import ThrottleTimes


@dataclass(frozen=True, slots=True)
class SimulatedActivity:
    """What GPM reports of a simulated GPU (or MIG GPU instance): ratios 0-1 by row, bytes per
    second for the links (``nvlink`` None: the GPU has no NVLink)."""

    graphics: float
    sm: float
    occupancy: float
    tensor: float
    tensor_pipes: dict[str, float]
    dram: float
    pipes: dict[str, float]
    pcie: dict[str, float]
    nvlink: dict[str, float] | None = None


@dataclass(frozen=True, slots=True)
class SimulatedGpu:
    """Physical quantities of one simulated GPU (base units), computed once per collection."""

    model: GpuModel
    memory_total_bytes: int
    memory_used_bytes: int
    memory_free_bytes: int
    memory_reserved_bytes: int
    utilization_ratio: float
    memory_utilization_ratio: float
    temperature_celsius: float
    power_usage_watts: float
    power_limit_watts: float
    energy_joules: float
    pcie_bytes_per_second: float  # both directions together
    sm_clock_hertz: float
    memory_clock_hertz: float
    performance_state: int
    busy: bool  # a process holds a context
    idle: bool  # (almost) no kernel runs
    power_capped: bool
    thermal_slowdown: bool  # software thermal slowdown
    hardware_slowdown: bool  # hardware thermal slowdown
    ecc_corrected: int
    ecc_uncorrected: int
    processes: int  # processes holding a context
    remapped_rows: RemappedRows | None = None  # None: the model does not remap rows, or MIG on
    retired_pages: RetiredPages | None = None  # None: the model does not retire pages
    xid_events: bool = True  # NVML delivers XID events for this GPU
    mig_enabled: bool = False
    activity: SimulatedActivity | None = None  # None: no GPM (before Hopper, or MIG on)
    throttled: ThrottleTimes | None = None  # clock-event times since the driver loaded
    nvlink: dict[str, dict[str, float]] | None = None  # NVLink rows by link (None: no series)

    @property
    def fan_speed_ratio(self) -> float | None:
        """Fans follow temperature; passively cooled boards have none."""
        if not self.model.has_fan:
            return None
        return round(min(1.0, max(0.3, 0.3 + (self.temperature_celsius - 40.0) * 0.016)), 2)

    @property
    def throttle_seconds(self) -> dict[str, float] | None:
        """Seconds the clocks were held back per reason (``gpu_throttle_seconds_total``)."""
        times = self.throttled
        if times is None:
            return None
        return {reason: round(value, 3) for reason, value in (
            ("sw_power_cap", times.capped), ("sw_thermal_slowdown", times.sw_hot),
            ("hw_thermal_slowdown", times.hw_hot), ("hw_power_brake_slowdown", 0.0),
            ("sync_boost", 0.0), ("thermal", times.sw_hot), ("board_limit", 0.0),
            ("reliability", 0.0), ("low_utilization", times.idle),
            ("below_application_clocks", times.below), ("below_base_clocks", times.below))}

    @property
    def throttle_reasons(self) -> dict[str, float]:
        """Active clock event reasons (1.0) by name; the rest 0.0."""
        return {
            "gpu_idle": float(self.idle),
            "applications_clocks_setting": 0.0,
            "sw_power_cap": float(self.power_capped and not self.idle),
            "hw_slowdown": float(self.hardware_slowdown),
            "sync_boost": 0.0,
            "sw_thermal_slowdown": float(self.thermal_slowdown),
            "hw_thermal_slowdown": float(self.hardware_slowdown),
            "hw_power_brake_slowdown": 0.0,
            "display_clock_setting": 0.0,
        }
