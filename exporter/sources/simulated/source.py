"""The simulated source: a realistic, changing fleet from a ``Scenario``, for hosts without GPUs.

Simulated time is ``t = (clock() - start) * speed`` seconds, ``start`` being ``clock()`` at the
first ``start()``. Everything is a function of (scenario, seed, t):

- processes live from ``start`` to ``stop``; a leaking one exits ("OOM") when the GPU would run
  out of memory; with ``restart_after`` the life repeats (pid + 101 per restart);
- GPU memory used = the processes' memory + a few MiB of driver bookkeeping; the firmware
  reserve is reported separately (NVML memory info v2 semantics: used + free + reserved = total);
- utilisation = sum of the busy processes' utilisation (capped at 1), with smooth noise that is
  a pure function of (seed, entity, 5 s bucket of t), so results do not depend on how often
  ``collect`` runs;
- temperature follows the noise-free load with first-order thermal lag toward
  ``idle + (full_load - idle) * load``; power lies between idle and the limit following load;
  the energy counter integrates that power exactly (piecewise-constant load between process
  start/stop events);
- clocks, P-state and throttle reasons follow load, temperature and the power limit;
- ECC counts, GPU loss and OOMs happen when the scenario says.

Stamps are wall-clock: ``taken_at`` is the ``clock()`` reading; a simulated moment ``t`` maps
to wall time ``start + t / speed`` (process start times too), so ages read in Prometheus are
compressed by ``speed``. ``duration_seconds`` is a modelled NVML cost (from measurements on an
H200: ~0.12 ms per GPU, +1.8 ms per GPU for process utilisation, +2.8 ms energy, +21 ms PCIe,
+0.24 ms GPM, +1.5 ms GPM's graphics-engine metric),
not the Python time, so equal inputs give equal snapshots.
"""

from __future__ import annotations

import math
import random
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import replace

from exporter.allocations import (
    EXCLUSIVE,
    Allocation,
    AllocationTable,
    DeviceId,
    join_allocations,
    parse_dra_device,
)
from exporter.catalogue.metrics import (
    GPU_ROWS,
    LAST_ACTIVE,
    MEMORY_UTILIZATION,
    PER_INSTANCE,
    UTILIZATION,
    Group,
    Value,
)
from exporter.health import MigProcess
from exporter.snapshot import (
    AllocationRow,
    GpuIdentity,
    GpuProcess,
    GpuReading,
    PodResourcesHealth,
    ProcessOwner,
    Snapshot,
)
from exporter.sources.simulated.health import (
    RemapSpec,
    RetiredSpec,
    mig_devices,
    nvlink_values,
    remapped_rows,
    retired_pages,
    xid_counts,
)
from exporter.sources.simulated.physics import SimulatedGpu
from exporter.sources.simulated.rows import Plan, plan, simulated_values
from exporter.sources.simulated.scenario import GpuSpec, Scenario
from exporter.sources.simulated.timeline import (
    BUCKET,
    DRIVER_BYTES,
    NO_VALUES,
    ActivitySum,
    GpuTimeline,
    ProcessTimeline,
    RestartOwner,
    oom_life,
    torch_values,
)

_RESTART_PID_STEP = 101
#: Simulated seconds after its start at which a process configured idle ran its last kernel.
LOADED_AFTER = 60.0
_BUS_IDS = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)  # a typical 8-GPU HGX board
_GPM_GROUPS = frozenset({Group.GPM, Group.GPM_ENGINE})
#: Seconds the simulated host has been up when the source starts (its counters' zero).
SIMULATED_UPTIME = 30 * 86400.0


class SimulatedSource:
    """A ``Source`` playing a ``Scenario``; deterministic for (scenario, seed, clock readings)."""

    name = "simulated"

    def __init__(self, scenario: Scenario, *, seed: int = 0,
                 clock: Callable[[], float] = time.time, speed: float = 1.0,
                 hostname: str | None = None) -> None:
        """Precompute everything that does not depend on time.

        Raises:
            ValueError: ``speed`` is not a positive finite number.
        """
        if not (isinstance(speed, (int, float)) and math.isfinite(speed) and speed > 0):
            raise ValueError(f"speed must be a positive number, got {speed!r}")
        self.scenario, self.seed, self._clock, self.speed = scenario, seed, clock, float(speed)
        self.hostname = hostname or scenario.hostname or socket.gethostname()
        self._start: float | None = None
        self._gpus = [self._build_gpu(g) for g in scenario.gpus]
        self._allocations = self._build_allocations()
        # What the simulated kubelet answers: healthy when the scenario has pod allocations.
        self._pod_resources = (PodResourcesHealth(True, "ok") if any(
            not a.slurm_job for a in scenario.allocations) else None)
        # The rows simulated with a set of groups on, per GPU and per MIG GPU instance.
        self._plans: dict[frozenset[Group], tuple[Plan, Plan]] = {}

    def _build_allocations(self) -> tuple[AllocationRow, ...]:
        """The scenario's allocations as the PodResources join would give them, then the
        Slurm jobs' as the prolog's allocation files would (a whole GPU each)."""
        uuids = [gpu.identity.uuid for gpu in self._gpus]
        pods = [a for a in self.scenario.allocations if not a.slurm_job]
        table = AllocationTable.of(
            Allocation(DeviceId(uuids[a.gpu], None if a.replica is None else str(a.replica),
                                uuids[a.gpu]), a.resource, a.namespace, a.pod, a.container)
            if a.claim is None else
            Allocation(parse_dra_device(a.claim.device), a.claim.driver, a.namespace, a.pod,
                       a.container, a.claim)
            for a in pods
        )
        jobs = tuple(
            AllocationRow(gpu=str(a.gpu), uuid=uuids[a.gpu], device_id=uuids[a.gpu],
                          gpu_instance="", resource=a.resource, namespace="", pod="",
                          container="", sharing=EXCLUSIVE, slurm_job=a.slurm_job, user=a.user,
                          uid="" if a.uid is None else str(a.uid))
            for a in self.scenario.allocations if a.slurm_job)
        return join_allocations(table, [
            GpuReading(identity=gpu.identity,
                       mig=mig_devices(gpu.spec.health.mig, gpu.identity.index, {}))
            for gpu in self._gpus]) + jobs

    def _key(self, entity: str) -> int:
        return random.Random(f"{self.seed}/{self.scenario.name}/{entity}").getrandbits(64)

    def _build_gpu(self, spec: GpuSpec) -> GpuTimeline:
        specs = [p for p in self.scenario.processes if p.gpu == spec.index]
        procs = [ProcessTimeline(p, oom_life(p, specs, spec),
                       self._key(f"proc/{spec.index}/{p.pid}")) for p in specs]
        key = self._key(f"gpu/{spec.index}")
        bus = _BUS_IDS[spec.index] if spec.index < len(_BUS_IDS) else 0x100 + spec.index
        identity = GpuIdentity(
            index=spec.index,
            uuid="GPU-" + str(uuid.UUID(int=random.Random(f"uuid/{self.seed}/{spec.index}")
                                        .getrandbits(128), version=4)),
            name=spec.model.name,
            pci_bus_id=f"00000000:{bus & 0xFF:02X}:{bus >> 8:02X}.0",
            memory_total_bytes=spec.model.memory_bytes,
            serial=str(1650000000000 + key % 1_000_000_000),
            vbios_version="96.00.99.00.01",
            power_limit_default_watts=spec.model.power_limit_watts,
            minor_number=spec.index,
        )
        return GpuTimeline(spec, identity, procs, key)

    # --- Source protocol ---------------------------------------------------------------------
    def start(self) -> None:
        """Fix the simulation's origin on the first call (idempotent; never raises)."""
        if self._start is None:
            self._start = self._clock()

    def close(self) -> None:
        """Nothing to release; the origin is kept so a restart continues the same timeline."""

    def collect(self, groups: frozenset[Group]) -> Snapshot:
        """The fleet at the current simulated time (starts the source if needed; never raises)."""
        self.start()
        now = self._clock()
        start = self._start if self._start is not None else now
        t = max(0.0, (now - start) * self.speed)
        readings = []
        lost = 0
        for gpu in self._gpus:
            lost_at = gpu.spec.lost_at
            if lost_at is not None and t >= lost_at:
                lost += 1
                readings.append(GpuReading(identity=gpu.identity, up=False, error="GPU is lost"))
            else:
                readings.append(self._read(gpu, t, start, groups))
        cost = len(self._gpus) * (0.00012 + 0.0018 * (Group.PROCESS_UTILIZATION in groups)
                                  + 0.0028 * (Group.ENERGY in groups)
                                  + 0.021 * (Group.PCIE in groups)
                                  + 0.00024 * (Group.GPM in groups)
                                  + 0.0015 * (Group.GPM_ENGINE in groups))
        return Snapshot(
            source=self.name, hostname=self.hostname, taken_at=now,
            duration_seconds=cost + 2e-6 * sum(len(r.processes) for r in readings),
            driver_version=self.scenario.driver_version,
            cuda_driver_version=self.scenario.cuda_driver_version,
            nvml_version=f"13.{self.scenario.driver_version}",
            gpus=tuple(readings), errors={"gpu_lost": lost} if lost else {},
            allocations=self._allocations, pod_resources=self._pod_resources,
            booted_at=start - SIMULATED_UPTIME, started_at=start,
        )

    # --- one GPU -----------------------------------------------------------------------------
    def _read(self, gpu: GpuTimeline, t: float, start: float, groups: frozenset[Group]
              ) -> GpuReading:
        model, spec = gpu.spec.model, gpu.spec
        used, util, mem_util, work = DRIVER_BYTES, 0.0, 0.0, 0.0
        procs: list[GpuProcess] = []
        health = spec.health
        mig_on = health.mig is not None  # NVML has no utilisation per GPU or process under MIG
        want_procs = Group.PROCESSES in groups
        want_torch = want_procs and Group.TORCH in groups
        want_putil = want_procs and Group.PROCESS_UTILIZATION in groups and not mig_on
        activity: ActivitySum | None = None
        instances: dict[int, ActivitySum] = {}
        if model.gpm and not _GPM_GROUPS.isdisjoint(groups):
            activity = ActivitySum()
        for p in gpu.procs:
            # the hot loop (8 GPUs x 32 processes per collect): ProcessTimeline.cycle and
            # the memory ramp inlined
            age = t - p.t0
            if age < 0.0:
                continue
            k = 0
            if p.period is not None:
                k = int(age // p.period)
                age -= k * p.period
            if p.life is not None and age >= p.life:
                continue
            if age < p.ramp:
                memory = int(p.context + p.grow * (age / p.ramp))
            else:
                memory = p.steady + (int(p.leak * (age - p.ramp)) if p.leak else 0)
            used += memory
            u = p.util
            if u > 0.0 and p.jitter > 0.0:
                u = round(min(1.0, max(0.0, u + p.jitter * p.noise.at(t))), 2)  # NVML: whole %
            util += u
            mem_util += u * p.mem_util
            work += u * p.sm
            if activity is not None:
                instance = p.spec.gpu_instance
                summed = activity if instance is None else instances.setdefault(
                    instance, ActivitySum())
                summed.add(u, p.mem_util, p.kernels)
            if want_procs:
                published = torch_values(p.torch, memory - p.context, age, t) \
                    if want_torch and p.torch is not None else NO_VALUES
                built = p.built
                # Last active: now (to the noise bucket, so a process is rebuilt no more often
                # than its utilisation changes) for a computing process; a process configured
                # idle last ran a kernel LOADED_AFTER seconds after it started (its model load).
                active = (t - t % BUCKET if p.util > 0.0 else t - age + min(age, LOADED_AFTER)) \
                    if want_putil else None
                process = built.process
                if process is None or built.restart != k or built.memory != memory \
                        or built.utilization != u or built.last_active != active \
                        or built.published != published:
                    process_values = published if active is None else {
                        **published, LAST_ACTIVE: start + active / self.speed}
                    process = built.process = GpuProcess(
                        pid=p.spec.pid + _RESTART_PID_STEP * k, type=p.spec.type,
                        used_memory_bytes=memory, sm_utilization_ratio=u if want_putil else None,
                        owner=self._owner(p, k, start), workload=p.spec.workload,
                        values=process_values,
                        gpu_instance=p.spec.gpu_instance,
                        compute_instance=p.spec.compute_instance)
                    built.restart, built.memory, built.utilization = k, memory, u
                    built.last_active, built.published = active, published
                procs.append(process)
        util, mem_util = round(min(1.0, util), 2), round(min(1.0, mem_util), 2)  # whole %
        work = min(1.0, work)
        busy = used > DRIVER_BYTES
        free = max(0, model.memory_bytes - model.reserved_bytes - used)
        temp_exact, energy = gpu.thermal(t)
        temp = float(round(temp_exact + 0.6 * gpu.tnoise.at(t)))
        demand = gpu.demand(work, busy) * (1.0 + 0.015 * gpu.noise.at(t))
        capped = demand >= 0.98 * gpu.limit
        power = min(demand, gpu.limit * (0.985 + 0.01 * abs(gpu.noise.at(t))))
        idle = util < 0.02  # the driver reports gpu_idle when (almost) no kernel runs
        sw_hot, hw_hot = temp >= model.slowdown_celsius, temp >= model.hw_slowdown_celsius
        if idle:
            sm_clock, mem_clock = model.sm_clock_idle_hertz, model.memory_clock_idle_hertz
        else:
            factor = min(1.0, math.sqrt(gpu.limit / demand)) if capped else 1.0
            if sw_hot:
                factor *= max(0.5, 1.0 - 0.04 * (temp - model.slowdown_celsius + 1.0))
            sm_clock = round(model.sm_clock_max_hertz * factor / 15e6) * 15e6  # 15 MHz steps
            mem_clock = model.memory_clock_max_hertz
        state = SimulatedGpu(
            model=model,
            memory_total_bytes=model.memory_bytes,
            memory_used_bytes=used,
            memory_free_bytes=free,
            memory_reserved_bytes=model.reserved_bytes,
            utilization_ratio=util,
            memory_utilization_ratio=mem_util,
            temperature_celsius=temp,
            power_usage_watts=round(power, 3),
            power_limit_watts=gpu.limit,
            energy_joules=round(energy, 3),
            pcie_bytes_per_second=util * model.pcie_bytes_per_second,
            sm_clock_hertz=sm_clock,
            memory_clock_hertz=mem_clock,
            performance_state=model.busy_pstate if busy else 8,
            busy=busy,
            idle=idle,
            power_capped=capped,
            thermal_slowdown=sw_hot,
            hardware_slowdown=hw_hot,
            ecc_corrected=int(spec.ecc_corrected_per_hour * t / 3600.0),
            ecc_uncorrected=sum(e.count for e in spec.ecc_uncorrected if e.at <= t),
            processes=len(procs),
            remapped_rows=(remapped_rows(health.remapped_rows or RemapSpec(), t, mig_on)
                           if model.row_remapping else None),
            retired_pages=(retired_pages(health.retired_pages or RetiredSpec(), t)
                           if model.ecc and not model.row_remapping else None),
            xid_events=health.xid_events,
            mig_enabled=mig_on,
            # Under MIG, GPM is read per GPU instance only.
            activity=activity.result(model) if activity is not None and not mig_on else None,
            throttled=gpu.throttled(t),
            nvlink=None if health.nvlink is None else nvlink_values(health.nvlink, t),
        )
        gpu_rows, instance_rows = self._plan(groups)
        values = simulated_values(gpu_rows, state)
        if mig_on:
            values.pop(UTILIZATION.name, None)
            values.pop(MEMORY_UTILIZATION.name, None)
        xids = (xid_counts(health.xids, t, start, self.speed)
                if Group.XID in groups and health.xid_events else {})
        mig = None
        if mig_on and Group.MIG in groups:
            by_instance: dict[tuple[int, int], list[MigProcess]] = {}
            for process in procs:
                if process.gpu_instance is not None:
                    by_instance.setdefault(
                        (process.gpu_instance, process.compute_instance or 0), []
                    ).append(MigProcess(process.pid, process.used_memory_bytes))
            mig = mig_devices(health.mig, spec.index, by_instance)
            if activity is not None:
                mig = tuple(replace(device, activity=_instance_activity(
                    state, instances.get(device.gpu_instance, ActivitySum()), instance_rows))
                    for device in mig)
        return GpuReading(identity=gpu.identity, values=values, processes=tuple(procs),
                          xids=xids, mig=mig)

    def _owner(self, p: ProcessTimeline, k: int, start: float) -> ProcessOwner:
        """The owner of restart ``k`` of ``p`` (cached: it only changes on a restart)."""
        if p.owner is None or p.owner.restart != k:
            begin = p.t0 + (p.period or 0.0) * k
            p.owner = RestartOwner(k, ProcessOwner(
                uid=p.spec.uid, user=p.spec.user, name=p.spec.name,
                start_time_seconds=start + begin / self.speed))
        return p.owner.owner

    def _plan(self, groups: frozenset[Group]) -> tuple[Plan, Plan]:
        """The rows simulated per GPU and per MIG GPU instance with ``groups`` on (worked out
        once per set of groups)."""
        found = self._plans.get(groups)
        if found is None:
            found = self._plans[groups] = (plan(GPU_ROWS, groups),
                                           plan((row for row, _ in PER_INSTANCE), groups))
        return found


def _instance_activity(state: SimulatedGpu, summed: ActivitySum, rows: Plan
                       ) -> dict[str, Value]:
    """GPM's figures of one MIG GPU instance, by the per-GPU row's name (the simulator's own
    functions of those rows, applied to the instance's activity)."""
    instance = replace(state, activity=summed.result(state.model))
    return simulated_values(rows, instance)
