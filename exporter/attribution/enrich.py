"""Enrichers: fill ``owner`` and ``pod`` of a snapshot's processes, returning a new snapshot.

Rule for processes whose owner is missing (``exporter.attribution.owners`` documents the lookup):

- the process *vanished* (its ``/proc`` entry had been read, in this collection or an earlier
  one, and is now gone): it exited between NVML's listing and enrichment, so it is dropped
  from ``processes``, and nothing is counted (that is normal);
- otherwise (never visible: another PID namespace or ``hidepid``; permission denied; garbled
  files) the process stays with ``owner=None`` (exposed as ``user="unknown"``) and
  ``errors["owner_lookup"]`` is counted once per pid: memory held by a process the exporter
  cannot see must never silently disappear.

Processes that already carry an owner or a pod are left as they are. Snapshots of the
simulated source are returned unchanged: their pids are invented, and looking them up in this
host's ``/proc`` would attach real users to fake processes. Error counts of the resolvers are
added to ``snapshot.errors``.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Protocol

from exporter.attribution.kubernetes import PodResolver
from exporter.attribution.owners import OwnerResolver, OwnerStatus
from exporter.snapshot import GpuProcess, GpuReading, Snapshot

#: Sources whose snapshots are never enriched (their processes are not on this host).
SKIPPED_SOURCES: frozenset[str] = frozenset({"simulated"})


class Enricher(Protocol):
    """Turns a snapshot into a new one with more facts filled in. Never raises."""

    def enrich(self, snapshot: Snapshot) -> Snapshot:
        """Return a new snapshot (the input is not modified)."""
        ...


def merge_errors(base: Mapping[str, int], extra: Mapping[str, int]) -> dict[str, int]:
    """Sum two error-count mappings by kind."""
    merged = dict(base)
    for kind, count in extra.items():
        merged[kind] = merged.get(kind, 0) + count
    return merged


class _Resolver(Protocol):
    def collection(self) -> AbstractContextManager[None]: ...
    def take_errors(self) -> dict[str, int]: ...


class _ProcessEnricher:
    """The walk both enrichers share: one resolver collection per snapshot, ``_process`` on
    every process of every GPU (None drops it), resolver errors merged into the snapshot's.
    """

    def __init__(self, resolver: _Resolver, skip_sources: frozenset[str]) -> None:
        self._resolver = resolver
        self.skip_sources = skip_sources

    def enrich(self, snapshot: Snapshot) -> Snapshot:
        """Return a new snapshot with the processes enriched. Never raises."""
        if snapshot.source in self.skip_sources:
            return snapshot
        with self._resolver.collection():
            gpus = tuple(self._gpu(gpu) for gpu in snapshot.gpus)
        errors = merge_errors(snapshot.errors, self._resolver.take_errors())
        return replace(snapshot, gpus=gpus, errors=errors)

    def _gpu(self, gpu: GpuReading) -> GpuReading:
        if not gpu.processes:
            return gpu
        processes = (self._process(process) for process in gpu.processes)
        return replace(gpu, processes=tuple(p for p in processes if p is not None))

    def _process(self, process: GpuProcess) -> GpuProcess | None:
        raise NotImplementedError


class OwnerEnricher(_ProcessEnricher):
    """Fills ``GpuProcess.owner`` from an ``OwnerResolver``; drops processes that exited."""

    def __init__(
        self, resolver: OwnerResolver, *, skip_sources: frozenset[str] = SKIPPED_SOURCES
    ) -> None:
        super().__init__(resolver, skip_sources)
        self.resolver = resolver

    def _process(self, process: GpuProcess) -> GpuProcess | None:
        if process.owner is not None:
            return process
        found = self.resolver.lookup(process.pid)
        if found.status is OwnerStatus.VANISHED:
            return None
        return replace(process, owner=found.owner) if found.owner else process


class PodEnricher(_ProcessEnricher):
    """Fills ``GpuProcess.pod`` from a ``PodResolver`` (None stays None for host processes)."""

    def __init__(
        self, resolver: PodResolver, *, skip_sources: frozenset[str] = SKIPPED_SOURCES
    ) -> None:
        super().__init__(resolver, skip_sources)
        self.resolver = resolver

    def _process(self, process: GpuProcess) -> GpuProcess:
        if process.pod is not None:
            return process
        # The owner's start time identifies the process, which lets the resolver skip
        # re-reading the cgroup of a pid it already knows.
        start = process.owner.start_time_seconds if process.owner else None
        pod = self.resolver.resolve(process.pid, start_time=start)
        return replace(process, pod=pod) if pod is not None else process


class _Chain:
    def __init__(self, enrichers: tuple[Enricher, ...]) -> None:
        self.enrichers = enrichers

    def enrich(self, snapshot: Snapshot) -> Snapshot:
        for enricher in self.enrichers:
            snapshot = enricher.enrich(snapshot)
        return snapshot


def chain(*enrichers: Enricher) -> Enricher:
    """One enricher that applies ``enrichers`` in order (put ``OwnerEnricher`` first: the pod
    enricher uses the owners' start times for its cache). ``chain()`` returns snapshots as-is.
    """
    return _Chain(enrichers)
