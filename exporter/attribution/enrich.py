"""Enrichment: fill the owner and workload (pod, Slurm job, container, ...) of a snapshot's
processes, and the kubelet's GPU allocations, returning a new snapshot.

One step per process: ``OwnerResolver.lookup`` reads ``/proc/<pid>`` once per (pid, start
time), giving the owner and the cgroup identity (``exporter.catalogue.workloads``: which
workload kind's path it is and what the path names). For a kind switched on, the kind's label
resolver names it (``PodResolver``: a pod from the kubelet log tree; ``ContainerNames``: a
container from its runtime's files), or the path's ids are the label values (a Slurm job).
Allocations come from a background ``PodResourcesPoller`` (never a call to the kubelet on the
collection path), joined with the snapshot's GPUs.

Rule for processes whose owner is missing (``exporter.attribution.owners`` documents the lookup):

- the process *vanished* (its ``/proc`` entry had been read, in this collection or an earlier
  one, and is now gone): it exited between NVML's listing and enrichment, so it is dropped
  from ``processes``, and nothing is counted (that is normal);
- otherwise (never visible: another PID namespace or ``hidepid``; permission denied; garbled
  files) the process stays with ``owner=None`` (exposed as ``user="unknown"``) and
  ``errors["owner_lookup"]`` is counted once per pid: memory held by a process the exporter
  cannot see must never silently disappear.

Processes that already carry an owner are left as they are. Snapshots of the
simulated source are returned unchanged: their pids are invented, and looking them up in this
host's ``/proc`` would attach real users to fake processes. Error counts of the resolvers are
added to ``snapshot.errors``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from exporter.attribution.owners import OwnerResolver, OwnerStatus
from exporter.attribution.workloads import LabelResolver, workload
from exporter.catalogue.workloads import WorkloadKind
from exporter.snapshot import GpuProcess, GpuReading, PodResourcesHealth, Snapshot

if TYPE_CHECKING:  # imported by the CLI only when switched on
    from exporter.attribution.podresources.client import PodResourcesPoller

#: Sources whose snapshots are never enriched (their processes are not on this host).
SKIPPED_SOURCES: frozenset[str] = frozenset({"simulated"})


class Enricher(Protocol):
    """Turns a snapshot into a new one with more facts filled in. Never raises."""

    def enrich(self, snapshot: Snapshot) -> Snapshot:
        """Return a new snapshot (the input is not modified)."""
        ...


def merge_errors(base: Mapping[str, int], *extra: Mapping[str, int]) -> dict[str, int]:
    """Sum error-count mappings by kind."""
    merged = dict(base)
    for more in extra:
        for kind, count in more.items():
            merged[kind] = merged.get(kind, 0) + count
    return merged


class ProcessEnricher:
    """Fills owners, and from cgroups the workloads of the ``kinds`` given (named by
    ``resolvers``, by kind name), of every process; adds the poller's ``allocations``.

    Cgroup attribution needs an ``owners`` resolver that reads cgroups
    (``OwnerResolver(cgroups=True)``). A process whose cgroup names a workload of another kind
    gets no workload.
    """

    def __init__(self, owners: OwnerResolver, kinds: Iterable[WorkloadKind] = (),
                 resolvers: Mapping[str, LabelResolver] | None = None, *,
                 allocations: PodResourcesPoller | None = None,
                 skip_sources: frozenset[str] = SKIPPED_SOURCES) -> None:
        self.owners = owners
        self.kinds = {kind.name: kind for kind in kinds}
        self.resolvers = dict(resolvers or {})
        self.allocations = allocations
        self.skip_sources = skip_sources

    def enrich(self, snapshot: Snapshot) -> Snapshot:
        """Return a new snapshot with the processes enriched. Never raises."""
        if snapshot.source in self.skip_sources:
            return snapshot
        with self.owners.collection():
            gpus = tuple(self._gpu(gpu) for gpu in snapshot.gpus)
        more = [resolver.take_errors() for resolver in
                (*self.resolvers.values(), self.allocations) if resolver is not None]
        errors = merge_errors(snapshot.errors, self.owners.take_errors(), *more)
        snapshot = replace(snapshot, gpus=gpus, errors=errors)
        return self._with_allocations(snapshot) if self.allocations is not None else snapshot

    def _with_allocations(self, snapshot: Snapshot) -> Snapshot:
        # Imported here: only a poller (--kubernetes) brings allocations.
        from exporter.allocations import join_allocations  # noqa: PLC0415
        from exporter.attribution.podresources.client import PollStatus  # noqa: PLC0415

        assert self.allocations is not None
        state = self.allocations.state()
        rows = () if state.table is None else join_allocations(state.table, snapshot.gpus)
        health = PodResourcesHealth(state.status is PollStatus.OK, state.status.value,
                                    state.error)
        return replace(snapshot, allocations=rows, pod_resources=health)

    def _gpu(self, gpu: GpuReading) -> GpuReading:
        if not gpu.processes:
            return gpu
        processes = (self._process(process) for process in gpu.processes)
        return replace(gpu, processes=tuple(p for p in processes if p is not None))

    def _process(self, process: GpuProcess) -> GpuProcess | None:
        if process.owner is not None:  # attributed already (by its source)
            return process
        found = self.owners.lookup(process.pid)
        if found.status is OwnerStatus.VANISHED:
            return None
        cgroup = found.cgroup
        kind = self.kinds.get(cgroup.kind) if cgroup is not None else None
        if kind is None or cgroup is None or process.workload is not None:
            return replace(process, owner=found.owner) if found.owner is not None else process
        return replace(process, owner=found.owner,
                       workload=workload(kind, cgroup, self.resolvers.get(kind.name)))


class _Chain:
    def __init__(self, enrichers: tuple[Enricher, ...]) -> None:
        self.enrichers = enrichers

    def enrich(self, snapshot: Snapshot) -> Snapshot:
        for enricher in self.enrichers:
            snapshot = enricher.enrich(snapshot)
        return snapshot


def chain(*enrichers: Enricher) -> Enricher:
    """One enricher applying ``enrichers`` in order (``chain()`` returns snapshots as-is)."""
    return enrichers[0] if len(enrichers) == 1 else _Chain(enrichers)
