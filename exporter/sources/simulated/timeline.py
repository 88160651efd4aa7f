"""What each scenario process and GPU does at simulated time ``t``.

A process's timeline (``ProcessTimeline``): when it lives (restarts, the OOM of a leak), its
memory and its utilisation noise. A GPU's (``GpuTimeline``): the load its processes put on it
and, from that, its temperature (first-order lag) and energy (integrated exactly between
process starts and exits). ``ActivitySum`` adds the processes' kernels up into GPM's figures.
``SimulatedSource`` reads these at each collection; everything here is a pure function of
(scenario, seed, t) except the caches that make the next reading cheap.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from exporter.catalogue.metrics import allocator
from exporter.catalogue.metrics.activity import PIPES, TENSOR_PIPES
from exporter.snapshot import GpuIdentity, GpuProcess, ProcessOwner
from exporter.sources.simulated.gpu_models import GpuModel
from exporter.sources.simulated.physics import SimulatedActivity
from exporter.sources.simulated.scenario import (
    CONTEXT_BYTES,
    PRECISIONS,
    GpuSpec,
    KernelSpec,
    ProcessSpec,
    TorchSpec,
)
from exporter.sources.simulated.throttle import CAP_SHARE, ThrottleTimes, segment

_M64 = (1 << 64) - 1
BUCKET = 5.0  # seconds of simulated time between independent noise values
DRIVER_BYTES = 4 << 20  # driver bookkeeping counted as used (v2 "used" on an idle GPU: ~8 MB)
_INF = math.inf
#: GPM's DRAM bandwidth ratio per unit of NVML's memory utilisation (H200: 0.72 for a memory
#: copy, 0.73 for an fp16 matrix product, 0.62 for fp32), and the integer pipe's share of SM
#: time (address arithmetic: 1-8 % measured).
_DRAM_PER_MEMORY_UTILIZATION = 0.7
_INTEGER_SHARE = 0.06


def _mix(x: int) -> int:
    """splitmix64 finaliser: a fast, well-spread integer hash."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _unit(key: int, bucket: int) -> float:
    """Uniform in [-1, 1), a pure function of (key, bucket)."""
    return _mix((key + bucket * 0x9E3779B97F4A7C15) & _M64) / 9223372036854775808.0 - 1.0


class _Noise:
    """Smooth value noise: linear interpolation between per-bucket values; caches one bucket."""

    __slots__ = ("_a", "_b", "_bucket", "_key")

    def __init__(self, key: int) -> None:
        self._key, self._bucket, self._a, self._b = key, -(1 << 62), 0.0, 0.0

    def at(self, t: float) -> float:
        pos = t / BUCKET
        bucket = math.floor(pos)
        if bucket != self._bucket:
            self._bucket = bucket
            self._a, self._b = _unit(self._key, bucket), _unit(self._key, bucket + 1)
        return self._a + (self._b - self._a) * (pos - bucket)


class ActivitySum:
    """GPM's figures of one GPU or MIG GPU instance, summed over its running processes."""

    __slots__ = ("memory", "occupancy", "pipes", "sm", "tensor", "tensor_pipes", "utilization")

    def __init__(self) -> None:
        self.utilization = self.memory = self.sm = self.occupancy = self.tensor = 0.0
        self.tensor_pipes = dict.fromkeys(TENSOR_PIPES, 0.0)
        self.pipes = dict.fromkeys(PIPES, 0.0)

    def add(self, utilization: float, memory_utilization: float, kernels: KernelSpec) -> None:
        """A process whose kernels ran ``utilization`` of the time."""
        self.utilization += utilization
        self.memory += utilization * memory_utilization
        busy = utilization * kernels.sm
        tensor = busy * kernels.tensor
        tensor_pipe, pipe = PRECISIONS[kernels.precision]
        self.sm += busy
        self.occupancy += utilization * kernels.occupancy
        self.tensor += tensor
        self.tensor_pipes[tensor_pipe] += tensor
        self.pipes[pipe] += 0.8 * (busy - tensor)

    def result(self, model: GpuModel) -> SimulatedActivity:
        def ratio(value: float) -> float:
            return round(min(1.0, value), 4)

        utilization = round(min(1.0, self.utilization), 2)  # whole %, as NVML

        sm = ratio(self.sm)
        pipes = {pipe: ratio(value) for pipe, value in self.pipes.items()}
        pipes["integer"] = ratio(self.pipes["integer"] + _INTEGER_SHARE * sm)
        pcie = utilization * model.pcie_bytes_per_second
        nvlink = 0.1 * sm * model.nvlink_bytes_per_second
        return SimulatedActivity(
            graphics=utilization, sm=sm, occupancy=ratio(self.occupancy),
            tensor=ratio(self.tensor),
            tensor_pipes={pipe: ratio(value) for pipe, value in self.tensor_pipes.items()},
            dram=ratio(_DRAM_PER_MEMORY_UTILIZATION * self.memory), pipes=pipes,
            pcie={"rx": round(0.06 * pcie), "tx": round(0.015 * pcie)},
            nvlink=({"rx": round(nvlink), "tx": round(nvlink)}
                    if model.nvlink_bytes_per_second else None),
        )


class BuiltProcess:
    """The last ``GpuProcess`` built for a process timeline and what it was built from: it is
    immutable, so it is reused while none of these change. Updated in place (one per timeline:
    the simulator rebuilds hundreds of processes a collection)."""

    __slots__ = ("last_active", "memory", "process", "published", "restart", "utilization")

    def __init__(self) -> None:
        self.process: GpuProcess | None = None  # None: none built yet
        self.restart = 0
        self.memory = 0
        self.utilization = 0.0
        self.last_active: float | None = None
        self.published: dict[str, float] = {}  # the PyTorch figures it publishes


class RestartOwner(NamedTuple):
    """The owner of one restart of a process (its start time moves with each restart)."""

    restart: int
    owner: ProcessOwner


class ProcessTimeline:
    """Precomputed timeline of one scenario process."""

    __slots__ = ("built", "context", "grow", "jitter", "kernels", "leak", "life", "mem_util",
                 "noise", "owner", "period", "ramp", "sm", "spec", "steady", "t0", "torch",
                 "util")

    def __init__(self, spec: ProcessSpec, life: float | None, key: int) -> None:
        self.spec, self.t0, self.life = spec, spec.start, life
        self.period = (life + spec.restart_after
                       if life is not None and spec.restart_after is not None else None)
        self.context = min(CONTEXT_BYTES, spec.memory_bytes)
        self.grow, self.ramp, self.leak = spec.memory_bytes - self.context, spec.ramp, \
            spec.leak_per_second
        self.util, self.jitter, self.mem_util = spec.utilization, spec.utilization_jitter, \
            spec.memory_utilization
        self.kernels, self.sm = spec.kernels, spec.kernels.sm
        self.noise = _Noise(key)
        self.steady = spec.memory_bytes
        self.owner: RestartOwner | None = None
        self.built = BuiltProcess()
        self.torch = spec.torch

    def cycle(self, t: float) -> tuple[int, float] | None:
        """(restart number, age) when alive at ``t``, else None."""
        age = t - self.t0
        if age < 0:
            return None
        if self.period is not None:
            k = int(age // self.period)
            age -= k * self.period
            return (k, age) if age < self.life else None  # type: ignore[operator]
        return (0, age) if self.life is None or age < self.life else None

    def next_boundary(self, x: float) -> float:
        """The first start or exit strictly after ``x``."""
        if x < self.t0:
            return self.t0
        if self.life is None:
            return _INF
        if self.period is None:
            end = self.t0 + self.life
            return end if x < end else _INF
        base = self.t0 + ((x - self.t0) // self.period) * self.period
        for candidate in (base + self.life, base + self.period, base + self.period + self.life):
            if candidate > x:
                return candidate
        return base + 2 * self.period  # only reached through rounding


NO_VALUES: dict[str, float] = {}


def torch_values(spec: TorchSpec, reserved: int, age: float, t: float) -> dict[str, float]:
    """What the allocator publisher of a simulated process reports: everything above the CUDA
    context is the allocator's reserve; counters count from the start of this life (``age``)."""
    allocated = int(reserved * (1.0 - spec.cache))
    return {
        allocator.TORCH_ALLOCATED.name: allocated,
        allocator.TORCH_RESERVED.name: reserved,
        allocator.TORCH_ACTIVE.name: allocated,
        allocator.TORCH_INACTIVE_SPLIT.name: int(reserved * spec.fragmentation),
        # a peak step (the first batch, evaluation) used most of today's cache
        allocator.TORCH_PEAK_ALLOCATED.name: allocated + int(0.8 * (reserved - allocated)),
        allocator.TORCH_ALLOC_RETRIES.name: int(spec.retries_per_hour * age / 3600.0),
        allocator.TORCH_OOMS.name: sum(e.count for e in spec.ooms if t - age <= e.at <= t),
    }


def oom_life(spec: ProcessSpec, on_gpu: list[ProcessSpec], gpu: GpuSpec) -> float | None:
    """How long ``spec`` lives: until ``stop`` or until its leak exhausts the GPU's memory.

    ``on_gpu``: every process of the GPU (``spec`` included); only a leaking process (one per
    GPU at most) looks at them, so building a GPU stays linear in its processes.
    """
    life = None if spec.stop is None else spec.stop - spec.start
    if spec.leak_per_second <= 0:
        return life
    overlapping = [o for o in on_gpu if o is not spec and (
        o.restart_after is not None or o.stop is None or o.stop > spec.start)]
    capacity = (gpu.model.memory_bytes - gpu.model.reserved_bytes - DRIVER_BYTES
                - sum(o.memory_bytes for o in overlapping))
    oom = spec.ramp + max(0.0, capacity - spec.memory_bytes) / spec.leak_per_second
    return max(1.0, oom if life is None else min(life, oom))  # >= 1 s keeps restarts periodic


class GpuTimeline:
    """One GPU's precomputed facts plus its thermal/energy integrator (cached per event)."""

    __slots__ = ("e_evt", "identity", "key", "limit", "next_b", "noise", "procs", "seg_busy",
                 "seg_load", "spec", "t_evt", "temp_evt", "throttled_evt", "tnoise")

    def __init__(self, spec: GpuSpec, identity: GpuIdentity, procs: list[ProcessTimeline],
                 key: int) -> None:
        self.spec, self.identity, self.procs, self.key = spec, identity, procs, key
        self.limit = spec.power_limit_watts or spec.model.power_limit_watts
        self.noise, self.tnoise = _Noise(key ^ 0x5EED), _Noise(key ^ 0x7E47)
        self.reset()

    def reset(self) -> None:
        """Start the integrator in steady state 10 time constants before t=0 (earlier history
        has decayed by e^-10 by then; starting there keeps the first collect cheap)."""
        self.t_evt = -10.0 * self.spec.thermal_time_constant
        self.seg_load, self.seg_busy = self.base_load(self.t_evt)
        self.temp_evt = self.target(self.seg_load, self.seg_busy)
        self.e_evt = float(3.0e8 + self.key % 100_000_000)  # energy since driver load
        self.throttled_evt = ThrottleTimes()  # clock-event times since then
        self.next_b = min([_INF] + [p.next_boundary(self.t_evt) for p in self.procs])

    def base_load(self, t: float) -> tuple[float, bool]:
        """(the SMs' work, any process alive) at ``t``: power and heat follow the work."""
        alive = [p for p in self.procs if p.cycle(t) is not None]
        return min(1.0, sum(p.util * p.sm for p in alive)), bool(alive)

    def target(self, load: float, busy: bool) -> float:
        """Steady temperature at ``load``; a lowered power limit also lowers the heat."""
        idle = self.spec.idle_celsius
        share = min(1.0, self.limit / self.demand(load, busy))
        return idle + (self.spec.full_load_celsius - idle) * load * share

    def demand(self, load: float, busy: bool) -> float:
        """Power the board would draw at ``load`` without a limit."""
        model = self.spec.model
        floor = model.idle_watts * (1.25 if busy else 1.0)  # a context keeps it out of deep idle
        return floor + (model.power_limit_watts - floor) * 0.9 * load

    def thermal(self, t: float) -> tuple[float, float]:
        """(temperature, energy joules) at ``t``; advances the cache over passed events."""
        if t < self.t_evt:
            self.reset()
        while self.next_b <= t:
            self._advance(self.next_b)
        return self._state_at(t)

    def _state_at(self, t: float) -> tuple[float, float]:
        dt = t - self.t_evt
        goal = self.target(self.seg_load, self.seg_busy)
        temp = goal + (self.temp_evt - goal) * math.exp(-dt / self.spec.thermal_time_constant)
        power = min(self.limit, self.demand(self.seg_load, self.seg_busy))
        return temp, self.e_evt + power * dt

    def throttled(self, t: float) -> ThrottleTimes:
        """The clock-event times at ``t`` (call ``thermal(t)`` first: it advances the cache)."""
        return self.throttled_evt.plus(self._segment(t - self.t_evt))

    def _segment(self, length: float) -> ThrottleTimes:
        load, busy, model = self.seg_load, self.seg_busy, self.spec.model
        return segment(length, load, self.demand(load, busy) >= CAP_SHARE * self.limit,
                       start=self.temp_evt, goal=self.target(load, busy),
                       tau=self.spec.thermal_time_constant, slowdown=model.slowdown_celsius,
                       hw_slowdown=model.hw_slowdown_celsius)

    def _advance(self, boundary: float) -> None:
        self.throttled_evt = self.throttled(boundary)
        self.temp_evt, self.e_evt = self._state_at(boundary)
        self.t_evt = boundary
        self.next_b = min([_INF] + [p.next_boundary(boundary) for p in self.procs])
        # load is constant until the next boundary: sample it inside the segment
        probe = boundary + (min(self.next_b, boundary + 1.0) - boundary) / 2
        self.seg_load, self.seg_busy = self.base_load(probe)
