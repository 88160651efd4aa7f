"""Enrichment: fill ``owner`` and ``pod`` of a snapshot's processes, returning a new snapshot.

One step per process: ``OwnerResolver.lookup`` reads ``/proc/<pid>`` once per (pid, start
time), giving the owner and (on Kubernetes) the cgroup identity; ``PodResolver`` names that
identity from the kubelet log tree. A new attribution (Slurm job, container, PodResources
allocation) adds what it needs to the owner lookup's cgroup step or a resolver here.

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

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from exporter.attribution.owners import OwnerResolver, OwnerStatus
from exporter.snapshot import GpuProcess, GpuReading, Snapshot

if TYPE_CHECKING:  # imported by the CLI only with --kubernetes
    from exporter.attribution.kubernetes import PodResolver

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
    """Fills owners (and, with a ``PodResolver``, pods) of every process of a snapshot.

    With ``pods`` the ``owners`` resolver must read cgroups (``OwnerResolver(cgroups=True)``).
    """

    def __init__(self, owners: OwnerResolver, pods: PodResolver | None = None, *,
                 skip_sources: frozenset[str] = SKIPPED_SOURCES) -> None:
        self.owners = owners
        self.pods = pods
        self.skip_sources = skip_sources

    def enrich(self, snapshot: Snapshot) -> Snapshot:
        """Return a new snapshot with the processes enriched. Never raises."""
        if snapshot.source in self.skip_sources:
            return snapshot
        with self.owners.collection():
            gpus = tuple(self._gpu(gpu) for gpu in snapshot.gpus)
        pod_errors = self.pods.take_errors() if self.pods is not None else {}
        errors = merge_errors(snapshot.errors, self.owners.take_errors(), pod_errors)
        return replace(snapshot, gpus=gpus, errors=errors)

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
        pod = process.pod
        if pod is None and found.cgroup is not None and self.pods is not None:
            pod = self.pods.names(found.cgroup)
        if found.owner is None and pod is process.pod:
            return process
        return replace(process, owner=found.owner, pod=pod)


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
