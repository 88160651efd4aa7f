"""Idle accounting: integrate, at every collection, what each user (pod, Slurm job: the
workloads' ``group_by`` labels) held, idled and used on this host into counters
(``exporter.catalogue.metrics.accounting``).

Recording rules could compute the same from the per-process series, but they would read every
process series every minute, a cost that grows with processes (docs/scale.md measured it at
30x the median rule group on 100 nodes). The exporter already holds every process at every
collection, so it keeps one running total per (user, workload) row instead, and the rules take
``rate()`` of a few series per host.

Definitions (the idle threshold is ``thresholds.IDLE_UTILIZATION_RATIO``, shared with the
alerts), applied to each collection over the time since the previous one:

- **held**: the memory each process holds; a GPU is shared among its processes in proportion
  to that memory (GPU-seconds summing to the time elapsed on a GPU with processes);
- **idle**: a process whose SM utilisation is under the threshold holds its memory idle; its
  share of the GPU counts as idle GPU time when the GPU's own activity (SM activity where it
  reports one, else utilisation) is under the threshold too (an idle process next to a busy
  one wastes memory, not the GPU);
- **used**: the process's SM utilisation (so held minus used is paid for and not used);
- **energy**: the GPU's power split by SM-utilisation shares, by memory shares when no
  kernel ran.

A process without a utilisation sample counts as neither idle nor used. A whole GPU allocated
to a workload that names its user (a Slurm job: ``Snapshot.allocations``) with no process on
it at all is held and idle by that job for the time (one GPU-second per second, split between
its allocations, no memory; the GPU's power is the job's): the job that was given a GPU and
runs nothing. Each collection
accounts the time since the previous one (at most ``MAX_GAP_SECONDS``: what happened during a
longer gap, with nobody scraping, is unknown) with the values it read, which describe that
time (utilisation samples are those since the previous collection). A row without processes
for ``FORGET_AFTER_SECONDS`` is dropped, so pods and jobs that are gone do not pile up; if it
comes back, its counter starts again from 0, which ``rate()`` reads as a reset.
"""

from __future__ import annotations

from dataclasses import replace

from exporter.attribution.workloads import WorkloadLabels
from exporter.catalogue import thresholds
from exporter.catalogue.metrics import POWER_USAGE, UNKNOWN_VALUE
from exporter.catalogue.metrics.accounting import (
    ATTRIBUTED_ENERGY,
    HELD_GPU_SECONDS,
    HELD_MEMORY_SECONDS,
    IDLE_GPU_SECONDS,
    IDLE_MEMORY_SECONDS,
    USED_GPU_SECONDS,
)
from exporter.catalogue.workloads import SLURM
from exporter.snapshot import (
    AccountingRow,
    AllocationRow,
    GpuProcess,
    GpuReading,
    Snapshot,
    Workload,
    gpu_activity,
)

__all__ = ["FORGET_AFTER_SECONDS", "MAX_GAP_SECONDS", "IdleAccounting"]

MAX_GAP_SECONDS = 300.0
FORGET_AFTER_SECONDS = 3600.0
#: A row: (user, *the values of ``WorkloadLabels.group_by``).
Key = tuple[str, ...]


class _Row:
    """One row's running totals (``energy``: None until a power reading was split)."""

    __slots__ = ("energy", "held_bytes", "held_gpus", "idle_bytes", "idle_gpus", "seen", "since",
                 "used_gpus")

    def __init__(self, seen: float, since: float) -> None:
        self.held_bytes = self.held_gpus = self.idle_bytes = self.idle_gpus = 0.0
        self.used_gpus = 0.0
        self.energy: float | None = None
        self.seen = seen
        self.since = since  # the start of the first interval it counts

    def snapshot_row(self, key: Key, group_by: tuple[str, ...]) -> AccountingRow:
        totals = {HELD_MEMORY_SECONDS.name: self.held_bytes, HELD_GPU_SECONDS.name: self.held_gpus,
                  IDLE_MEMORY_SECONDS.name: self.idle_bytes, IDLE_GPU_SECONDS.name: self.idle_gpus,
                  USED_GPU_SECONDS.name: self.used_gpus}
        if self.energy is not None:
            totals[ATTRIBUTED_ENERGY.name] = self.energy
        return AccountingRow(key[0], dict(zip(group_by, key[1:], strict=True)), totals,
                             self.since)


class IdleAccounting:
    """An enricher that fills ``Snapshot.accounting``. ``workloads``: keep the rows of
    different workloads apart by their ``group_by`` labels (the exposition's; without kinds
    switched on, one row per user)."""

    def __init__(self, workloads: WorkloadLabels | None = None) -> None:
        self._workloads = workloads if workloads is not None else WorkloadLabels()
        self._rows: dict[Key, _Row] = {}
        self._last: float | None = None

    def enrich(self, snapshot: Snapshot) -> Snapshot:
        """Return ``snapshot`` with every row's totals up to this collection."""
        now = snapshot.taken_at
        elapsed = 0.0 if self._last is None else min(max(now - self._last, 0.0), MAX_GAP_SECONDS)
        self._last = now
        for gpu in snapshot.gpus:
            if gpu.up and gpu.processes:
                self._account(gpu, now, elapsed)
        if snapshot.allocations:
            self._account_allocations(snapshot, now, elapsed)
        rows = self._rows
        for key in [key for key, row in rows.items() if now - row.seen > FORGET_AFTER_SECONDS]:
            del rows[key]
        if not rows:
            return snapshot
        group_by = self._workloads.group_by
        return replace(snapshot, accounting=tuple(
            row.snapshot_row(key, group_by) for key, row in sorted(rows.items())))

    def _key(self, process: GpuProcess) -> Key:
        """The row of ``process``."""
        owner = process.owner
        user = owner.user if owner is not None else UNKNOWN_VALUE
        return (user, *self._workloads.group_values(process.workload))

    def _allocation_key(self, allocation: AllocationRow) -> Key:
        """The row of a Slurm job's allocation: its user and its workload labels."""
        job = Workload(SLURM.name, {label: allocation.slurm_job for label in SLURM.labels})
        return (allocation.user, *self._workloads.group_values(job))

    def _account_allocations(self, snapshot: Snapshot, now: float, elapsed: float) -> None:
        """Whole GPUs given to a job (a user known) with no process on them: held and idle by
        the job, split between its allocations of that GPU."""
        idle_gpus = {gpu.identity.uuid: gpu for gpu in snapshot.gpus
                     if gpu.up and not gpu.processes}
        holders: dict[str, list[AllocationRow]] = {}
        for allocation in snapshot.allocations:
            if allocation.user and not allocation.gpu_instance and allocation.uuid in idle_gpus:
                holders.setdefault(allocation.uuid, []).append(allocation)
        rows = self._rows
        for uuid, allocations in holders.items():
            power = idle_gpus[uuid].value(POWER_USAGE.name)
            share = 1.0 / len(allocations)
            for allocation in allocations:
                key = self._allocation_key(allocation)
                row = rows.get(key)
                if row is None:
                    row = rows[key] = _Row(now, now - elapsed)
                row.seen = now
                if elapsed == 0.0:
                    continue
                row.held_gpus += share * elapsed
                row.idle_gpus += share * elapsed
                if power is not None:
                    row.energy = (row.energy or 0.0) + power * share * elapsed

    def _gpu_sums(self, gpu: GpuReading) -> dict[Key, list[float]]:
        """Per row on ``gpu``: [memory held, memory held by idle processes, SM utilisation].

        Per process one dict lookup and list updates: this runs for every process of every
        collection (a third of the time of three dicts of sums).
        """
        sums: dict[Key, list[float]] = {}
        ratio = thresholds.IDLE_UTILIZATION_RATIO
        key_of = self._key
        for process in gpu.processes:
            key = key_of(process)
            memory = process.used_memory_bytes or 0
            utilization = process.sm_utilization_ratio
            row = sums.get(key)
            if row is None:
                row = sums[key] = [0, 0, 0.0]
            row[0] += memory
            if utilization is not None:
                row[2] += utilization
                if utilization < ratio:
                    row[1] += memory
        return sums

    def _account(self, gpu: GpuReading, now: float, elapsed: float) -> None:
        sums = self._gpu_sums(gpu)
        memory = sum(row[0] for row in sums.values())
        busy = sum(row[2] for row in sums.values())
        activity = gpu_activity(gpu)
        gpu_idle = activity is not None and activity < thresholds.IDLE_UTILIZATION_RATIO
        power = gpu.value(POWER_USAGE.name)
        rows = self._rows
        for key, (held_bytes, idle_bytes, used) in sums.items():
            row = rows.get(key)
            if row is None:
                row = rows[key] = _Row(now, now - elapsed)
            row.seen = now
            if elapsed == 0.0:
                continue  # the first collection only opens the rows at 0
            share = held_bytes / memory if memory else 0.0
            row.held_bytes += held_bytes * elapsed
            row.held_gpus += share * elapsed
            row.idle_bytes += idle_bytes * elapsed
            if gpu_idle and memory:
                row.idle_gpus += idle_bytes / memory * elapsed
            row.used_gpus += used * elapsed
            if power is not None:
                split = used / busy if busy > 0 else share
                row.energy = (row.energy or 0.0) + power * split * elapsed
