"""One reader thread per GPU: reads of different GPUs overlap, and a hung GPU hangs alone.

NVML is thread-safe and its ctypes calls release the GIL, so the slow calls of different GPUs
(per-process utilisation ~1.8 ms, energy ~2.8 ms, PCIe ~21 ms on an H200) overlap: a fresh
collection of 8 busy GPUs costs about one GPU's worth. ``GpuWorkers.run`` hands each GPU's
read to that GPU's own daemon thread and waits at most ``timeout`` for all of them. A GPU
whose read has not returned by then is answered ``Hung``; its thread stays in the call, and
later collections answer ``Hung`` for it at once without queueing another call, so there is
never more than one outstanding call per GPU and threads never pile up. When the call returns
at last, the next collection reads that GPU again: recovery needs no restart.

With a single GPU the read runs inline in the caller's thread: no thread hop, so one GPU
costs what it did before; a hang there is the scheduler's (its collection overruns and
``busy()`` says which GPU it is stuck in). Threads are daemons: a call that never returns
cannot keep the process from exiting.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Done", "Failed", "GpuWorkers", "Hung", "Outcome"]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Done(Generic[T]):
    """The read returned ``value``."""

    value: T


@dataclass(frozen=True, slots=True)
class Failed:
    """The read raised ``error`` (the caller decides what it means for the GPU)."""

    error: Exception


@dataclass(frozen=True, slots=True)
class Hung:
    """The read has been running for ``seconds``; ``new`` the first time it is reported."""

    seconds: float
    new: bool


Outcome = Done[T] | Failed | Hung


class _Worker(Generic[T]):
    """One GPU's thread and its single job slot; every field is guarded by the shared lock."""

    def __init__(self, index: int, lock: threading.Lock) -> None:
        self.index = index
        self.wake = threading.Condition(lock)
        self.job: Callable[[], T] | None = None
        self.busy_since: float | None = None  # the current call's start (clock seconds)
        self.outcome: Done[T] | Failed | None = None
        self.abandoned = False  # the collection that asked stopped waiting (a hang)
        self.thread: threading.Thread | None = None


class GpuWorkers(Generic[T]):
    """Runs one read per GPU concurrently with a bounded wait (see the module docstring)."""

    def __init__(self, timeout: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._finished = threading.Condition(self._lock)
        self._workers: dict[int, _Worker[T]] = {}
        self._inline: tuple[int, float] | None = None  # (GPU index, start) of an inline read
        self._closed = False

    def run(self, reads: Mapping[int, Callable[[], T]]) -> dict[int, Outcome[T]]:
        """Read every GPU once: ``{index: Done | Failed | Hung}`` within about ``timeout``."""
        if len(reads) == 1:
            ((index, read),) = reads.items()
            if index not in self._workers:
                return {index: self._run_inline(index, read)}
        results: dict[int, Outcome[T]] = {}
        waiting: list[_Worker[T]] = []
        with self._lock:
            start = self._clock()
            for index, read in reads.items():
                worker = self._workers.get(index)
                if worker is None:
                    worker = self._workers[index] = _Worker(index, self._lock)
                if worker.busy_since is not None:  # the last call has not returned yet
                    results[index] = Hung(start - worker.busy_since, new=False)
                    continue
                worker.job, worker.busy_since, worker.outcome = read, start, None
                if worker.thread is None:
                    worker.thread = threading.Thread(target=self._loop, args=(worker,),
                                                     name=f"gpu-{index}-reader", daemon=True)
                    worker.thread.start()
                worker.wake.notify()
                waiting.append(worker)
            deadline = start + self.timeout
            while any(w.outcome is None for w in waiting):
                remaining = deadline - self._clock()
                if remaining <= 0:
                    break
                self._finished.wait(remaining)
            now = self._clock()
            for worker in waiting:
                if worker.outcome is not None:
                    results[worker.index] = worker.outcome
                    worker.outcome = None
                else:
                    worker.abandoned = True
                    assert worker.busy_since is not None
                    results[worker.index] = Hung(now - worker.busy_since, new=True)
        return {index: results[index] for index in reads}

    def busy(self) -> dict[int, float]:
        """Seconds each GPU's current read has been running (GPUs not being read are absent)."""
        with self._lock:
            now = self._clock()
            running = {w.index: now - w.busy_since for w in self._workers.values()
                       if w.busy_since is not None}
            inline = self._inline
            if inline is not None:
                running[inline[0]] = now - inline[1]
            return running

    def close(self) -> None:
        """Stop idle threads; a thread stuck in a call ends when (if ever) the call returns."""
        with self._lock:
            self._closed = True
            for worker in self._workers.values():
                worker.wake.notify()

    def _run_inline(self, index: int, read: Callable[[], T]) -> Done[T] | Failed:
        # One slot, set and cleared by plain assignment (atomic): no lock on the one-GPU path.
        self._inline = (index, self._clock())
        try:
            return Done(read())
        except Exception as exc:  # the caller maps errors to a GPU state
            return Failed(exc)
        finally:
            self._inline = None

    def _loop(self, worker: _Worker[T]) -> None:
        while True:
            with self._lock:
                while worker.job is None and not self._closed:
                    worker.wake.wait()
                if self._closed:
                    return
                read, worker.job = worker.job, None
            assert read is not None
            outcome: Done[T] | Failed
            try:
                outcome = Done(read())
            except Exception as exc:  # handed to the collection that asked
                outcome = Failed(exc)
            with self._lock:
                if worker.abandoned:
                    assert worker.busy_since is not None
                    log.warning("GPU %d answered again after %.1fs; reading it from the next "
                                "collection on", worker.index, self._clock() - worker.busy_since)
                    worker.abandoned = False
                else:
                    worker.outcome = outcome
                worker.busy_since = None
                self._finished.notify_all()
