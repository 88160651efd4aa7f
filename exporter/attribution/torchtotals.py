"""Per-user PyTorch counters: OOM errors and allocation retries summed per GPU and user.

The per-process counters (``gpu_process_torch_ooms_total`` and the retries) vanish with their
process, and a sum over the live ones drops whenever a process exits, so no rule could turn
them into a per-user rate without reading every process series. This enrichment keeps, per
(GPU, user), what exited processes had counted and adds the live processes' counts: a real
counter that only grows while the exporter runs
(``exporter.catalogue.metrics.allocator.USER_COUNTERS``).

- Processes present in the first snapshot count from that moment (what they counted before
  the exporter started is not news); processes that appear later count from zero, so an OOM
  published in a new process's first file is counted.
- A process whose figures are missing for a while (a late file) keeps its last counts; its
  counts are retired (kept in the user's total) only when it leaves its GPU's process list.
- A count that goes down for the same process (the program reset its allocator statistics)
  retires the old count and starts again from the new one.
- A GPU that is down keeps its processes as they were until it answers again.

State is one entry per live (GPU, process) and one per (GPU, user) ever seen with a counter.
"""

from __future__ import annotations

from dataclasses import replace

from exporter.catalogue.metrics import UNKNOWN_VALUE, Metric
from exporter.catalogue.metrics.allocator import USER_COUNTERS
from exporter.snapshot import GpuProcess, Snapshot

__all__ = ["TorchUserTotals"]

#: (pid, start time): one process (a reused pid has another start time).
_ProcessKey = tuple[int, float]


class _Gpu:
    """One GPU's state: live processes (user, counted so far, count at their baseline) and
    the counts of exited processes per user."""

    __slots__ = ("live", "retired")

    def __init__(self) -> None:
        self.live: dict[_ProcessKey, tuple[str, list[float], list[float]]] = {}
        self.retired: dict[str, list[float]] = {}

    def retire(self, user: str, counts: list[float]) -> None:
        total = self.retired.setdefault(user, [0.0] * len(counts))
        for index, value in enumerate(counts):
            total[index] += value

    def totals(self) -> dict[str, list[float]]:
        totals = {user: list(counts) for user, counts in self.retired.items()}
        for user, counted, _ in self.live.values():
            total = totals.setdefault(user, [0.0] * len(counted))
            for index, value in enumerate(counted):
                total[index] += value
        return totals


class TorchUserTotals:
    """Fills ``GpuReading.values[row.name]`` (user -> count) for each per-user counter row."""

    def __init__(self, rows: dict[Metric, Metric] = USER_COUNTERS) -> None:
        self._rows = tuple(rows.items())
        self._gpus: dict[str, _Gpu] = {}
        self._first = True

    def enrich(self, snapshot: Snapshot) -> Snapshot:
        """Return ``snapshot`` with the per-user totals on each GPU that is up."""
        first, self._first = self._first, False
        gpus = []
        for gpu in snapshot.gpus:
            if not gpu.up:
                gpus.append(gpu)
                continue
            state = self._gpus.setdefault(gpu.identity.uuid, _Gpu())
            seen = {self._update(state, process, first) for process in gpu.processes}
            for key in [key for key in state.live if key not in seen]:
                user, counted, _ = state.live.pop(key)
                state.retire(user, counted)
            totals = state.totals()
            if not totals:
                gpus.append(gpu)
                continue
            values = dict(gpu.values)
            for index, (row, _) in enumerate(self._rows):
                values[row.name] = {user: counts[index] for user, counts in sorted(totals.items())}
            gpus.append(replace(gpu, values=values))
        return replace(snapshot, gpus=tuple(gpus))

    def _update(self, state: _Gpu, process: GpuProcess, first: bool) -> _ProcessKey:
        owner = process.owner
        key = (process.pid, owner.start_time_seconds if owner is not None else 0.0)
        raw = [process.values.get(source.name) for _, source in self._rows]
        if all(value is None for value in raw):
            return key  # no figures (yet, or a late file): keep what was counted
        entry = state.live.get(key)
        if entry is None:
            user = owner.user if owner is not None else UNKNOWN_VALUE
            base = [float(value) if first and value is not None else 0.0 for value in raw]
            entry = (user, [0.0] * len(raw), base)
            state.live[key] = entry
        user, counted, base = entry
        for index, value in enumerate(raw):
            if value is None:
                continue
            if value < base[index] + counted[index]:  # reset: keep the old count, start anew
                state.retire(user, [counted[i] if i == index else 0.0 for i in range(len(raw))])
                counted[index], base[index] = 0.0, 0.0
            counted[index] = value - base[index]
        return key
