"""When each GPU process last ran a kernel, from NVML's per-process utilisation samples.

``nvmlDeviceGetProcessUtilization(handle, lastSeenTimeStamp)`` returns the samples newer than
``lastSeenTimeStamp``, each with a CPU timestamp in microseconds since the Unix epoch and the
process's SM utilisation. A process that runs nothing gets no sample (or one with ``smUtil``
0), so the newest sample with ``smUtil`` > 0 is the last time its kernels ran. The exporter
asks with the newest timestamp it has seen (the source already keeps it per GPU), so each
sample is read once; ``LastActive`` keeps the result per pid between collections.

Across exporter restarts: the first collection asks with ``lastSeenTimeStamp`` 0, which returns
whatever NVML's own sample buffer still holds. What NVML no longer holds is lost: a process
that went idle before that window looks "never active" (the metric is absent for it) until its
kernels run again. How far back the buffer reaches on a real GPU is measured by
``scripts/gpu/check_last_active.py`` (see docs/gpu-verification.md).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, Final

__all__ = ["MICROSECONDS", "LastActive", "sample_seconds"]

MICROSECONDS: Final = 1_000_000
#: Samples stamped before this (2001-09-09) or further than FUTURE_SLACK_SECONDS ahead of the
#: collection cannot be real: a garbled sample must not make a process look active for ever.
EARLIEST_SECONDS: Final = 1_000_000_000
FUTURE_SLACK_SECONDS: Final = 60.0


def sample_seconds(sample: Any, now: float) -> float | None:
    """The sample's time in Unix seconds if it is plausible and shows SM activity, else None."""
    try:
        stamp = int(sample.timeStamp) / MICROSECONDS
        busy = int(sample.smUtil) > 0
    except (AttributeError, TypeError, ValueError, OverflowError):
        return None
    if not busy or not EARLIEST_SECONDS <= stamp <= now + FUTURE_SLACK_SECONDS:
        return None
    return stamp


class LastActive:
    """Per pid, the newest time a sample showed the process's kernels running (one GPU).

    Pids no longer on the GPU are forgotten at each update, so a reused pid starts afresh.
    Callers with the process's start time should also ignore a time before it (a sample of an
    earlier process that had the same pid, still in NVML's buffer after a restart).
    """

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[int, float] = {}

    def forget(self) -> None:
        """No process holds a context: forget every pid."""
        self._seen.clear()

    def update(
        self, samples: Iterable[Any], live_pids: Collection[int], now: float
    ) -> dict[int, float]:
        """Fold in new samples; returns ``{pid: last active Unix seconds}`` for live pids.

        ``samples`` are NVML's ``nvmlProcessUtilizationSample_t`` (pid, timeStamp, smUtil, ...);
        ``live_pids`` are the processes holding a context now; ``now`` is the collection time.
        """
        seen = self._seen
        for sample in samples:
            stamp = sample_seconds(sample, now)
            if stamp is None:
                continue
            try:
                pid = int(sample.pid)
            except (AttributeError, TypeError, ValueError):
                continue
            if stamp > seen.get(pid, 0.0):
                seen[pid] = stamp
        for pid in [p for p in seen if p not in live_pids]:
            del seen[pid]
        return {pid: stamp for pid, stamp in seen.items() if pid in live_pids}
