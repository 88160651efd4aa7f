"""NVML process lists and per-process utilisation: probing, sanity checks, merging.

Process-list symbols changed with driver generations (``_v3`` since 510.39, ``_v2`` since R450,
the unsuffixed v1 symbol before that), and R535.43-535.86 wrote a larger struct through ``_v3``
so that readers saw shuffled pid/memory fields from the second entry on. The lister probes the
newest variant first, steps down on ``FunctionNotFound``/``NVMLLibraryMismatchError`` and keeps
the first that works for the life of the source; the cleaner drops entries that cannot be real.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final

from exporter.catalogue.metrics.process import LAST_ACTIVE
from exporter.snapshot import GpuProcess, ProcessType
from exporter.sources.nvml.errors import (
    FUNCTION_NOT_FOUND,
    INSUFFICIENT_SIZE,
    NOT_FOUND,
    NVML_SUCCESS,
)

log = logging.getLogger(__name__)

#: Linux's hard ceiling for pid_max (PID_MAX_LIMIT = 2**22): larger "pids" are shuffled fields.
PID_MAX_LIMIT: Final = 4_194_304
#: NVML's "not available" marker for 64-bit values (bindings map it to None for memory).
VALUE_NOT_AVAILABLE: Final = 2**64 - 1
#: GPU/compute instance id NVML reports when MIG is off.
NO_INSTANCE: Final = 0xFFFFFFFF
#: Largest plausible MIG instance id (H100/H200 have at most 7 GPU instances).
MAX_INSTANCE_ID: Final = 64

ProcessCall = Callable[[Any], Sequence[Any]]


class _ProcessInfoV1(ctypes.Structure):
    """``nvmlProcessInfo_v1_t``: what the unsuffixed (pre-R450) symbols fill in."""

    _fields_ = (("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong))


@dataclass(frozen=True, slots=True)
class RawProcess:
    """One entry of a v1 process list, shaped like nvidia-ml-py's friendly objects."""

    pid: int
    usedGpuMemory: int | None  # the binding's attribute name


def _v1_call(nvml: ModuleType, symbol: str) -> ProcessCall | None:
    """A reader for the unsuffixed v1 symbol, which nvidia-ml-py does not wrap.

    The returned callable raises ``nvml.NVMLError`` like the binding's own wrappers.
    """
    get_pointer = getattr(nvml, "_nvmlGetFunctionPointer", None)
    if get_pointer is None:
        return None

    def read(handle: Any) -> Sequence[Any]:
        fn = get_pointer(symbol)  # raises NVMLError_FunctionNotFound when the driver lacks it
        count = ctypes.c_uint(0)
        ret = fn(handle, ctypes.byref(count), None)
        if ret == NVML_SUCCESS:
            return ()
        if ret != INSUFFICIENT_SIZE:
            raise nvml.NVMLError(ret)
        # Oversize like the binding does: processes may start between the two calls.
        count.value = count.value * 2 + 5
        entries = (_ProcessInfoV1 * count.value)()
        ret = fn(handle, ctypes.byref(count), entries)
        if ret != NVML_SUCCESS:
            raise nvml.NVMLError(ret)
        return tuple(
            RawProcess(
                pid=int(e.pid),
                usedGpuMemory=None if e.usedGpuMemory == VALUE_NOT_AVAILABLE else e.usedGpuMemory,
            )
            for e in entries[: count.value]
        )

    return read


class ProcessLister:
    """Lists compute or graphics processes with the newest call the driver supports.

    The chosen variant is shared by all GPUs (it depends on the driver, not on the GPU).
    ``__call__`` raises ``nvml.NVMLError`` (FunctionNotFound once every variant failed), so the
    caller's usual unsupported/lost handling applies.
    """

    def __init__(self, nvml: ModuleType, kind: str) -> None:
        self._nvml = nvml
        self.kind = kind  # "Compute" or "Graphics"
        base = f"nvmlDeviceGet{kind}RunningProcesses"
        candidates: list[tuple[str, ProcessCall]] = []
        for suffix in ("_v3", "_v2"):
            fn = getattr(nvml, base + suffix, None)
            if fn is not None:
                candidates.append((base + suffix, fn))
        v1 = _v1_call(nvml, base)
        if v1 is not None:
            candidates.append((base + " (v1)", v1))
        self._candidates = candidates
        self._chosen = 0
        self._step_down = threading.Lock()
        self._mismatch: type[BaseException] | tuple[()] = getattr(
            nvml, "NVMLLibraryMismatchError", ()
        )

    @property
    def function_name(self) -> str | None:
        """The variant in use (or the next to probe); None once every variant failed."""
        if self._chosen < len(self._candidates):
            return self._candidates[self._chosen][0]
        return None

    def __call__(self, handle: Any) -> Sequence[Any]:
        """Read the process list of one GPU.

        Raises:
            NVMLError: from the driver, or FunctionNotFound when no variant exists.
        """
        while (chosen := self._chosen) < len(self._candidates):
            name, fn = self._candidates[chosen]
            try:
                return fn(handle)
            except self._mismatch:
                pass
            except self._nvml.NVMLError as exc:
                if getattr(exc, "value", None) != FUNCTION_NOT_FOUND:
                    raise
            with self._step_down:  # GPUs read concurrently: step down once per variant
                if self._chosen == chosen:
                    log.info("%s is not in this driver; trying an older process-list call", name)
                    self._chosen += 1
        raise self._nvml.NVMLError(FUNCTION_NOT_FOUND)


def _instance_id_ok(value: Any) -> bool:
    return value is None or value == NO_INSTANCE or (isinstance(value, int) and
                                                     0 <= value < MAX_INSTANCE_ID)


def _memory_ok(memory: Any, memory_total: int) -> bool:
    # memory_total is 0 when the GPU's identity could not be read: then only the sign is checked.
    if not isinstance(memory, int) or memory < 0:
        return False
    return memory_total <= 0 or memory <= memory_total


def clean_entries(entries: Sequence[Any], memory_total: int) -> tuple[dict[int, int | None], int]:
    """Drop entries that cannot be real; return ``{pid: used bytes or None}`` and the drop count.

    Dropped: pid <= 0 or above Linux's PID ceiling, memory above the device total, MIG instance
    ids out of range (the R535 shuffled-struct symptoms), and every entry of a pid listed twice
    with different values. An exact duplicate is harmless and folded into one.
    """
    if not entries:  # an idle GPU: most collections of most GPUs
        return {}, 0
    kept: dict[int, int | None] = {}
    copies: dict[int, int] = {}
    conflicting: set[int] = set()
    garbled = 0
    for entry in entries:
        pid = getattr(entry, "pid", None)
        memory = getattr(entry, "usedGpuMemory", None)
        if (
            not isinstance(pid, int)
            or not 0 < pid <= PID_MAX_LIMIT
            or (memory is not None and not _memory_ok(memory, memory_total))
            or not _instance_id_ok(getattr(entry, "gpuInstanceId", None))
            or not _instance_id_ok(getattr(entry, "computeInstanceId", None))
        ):
            garbled += 1
            continue
        if pid in kept:
            copies[pid] += 1
            if kept[pid] != memory:
                conflicting.add(pid)
            continue
        kept[pid] = memory
        copies[pid] = 1
    for pid in conflicting:
        del kept[pid]
        garbled += copies[pid]
    return kept, garbled


def merge_processes(
    compute: Mapping[int, int | None],
    graphics: Mapping[int, int | None],
    utilization: Mapping[int, float] | None,
    last_active: Mapping[int, float] | None = None,
) -> tuple[GpuProcess, ...]:
    """One ``GpuProcess`` per pid, sorted by pid; owners are left for enrichment.

    ``utilization`` None means per-process utilisation was not read (ratio stays None);
    otherwise listed processes without a sample get 0.0. ``last_active`` (pid -> Unix seconds
    of the newest sample showing its kernels) goes into ``values`` where known.
    """
    processes: list[GpuProcess] = []
    for pid in sorted(compute.keys() | graphics.keys()):
        in_compute = pid in compute
        in_graphics = pid in graphics
        if in_compute and in_graphics:
            kind = ProcessType.COMPUTE_GRAPHICS
            a, b = compute[pid], graphics[pid]
            memory = b if a is None else a if b is None else max(a, b)
        elif in_compute:
            kind, memory = ProcessType.COMPUTE, compute[pid]
        else:
            kind, memory = ProcessType.GRAPHICS, graphics[pid]
        ratio = None if utilization is None else utilization.get(pid, 0.0)
        active = None if last_active is None else last_active.get(pid)
        processes.append(GpuProcess(pid=pid, type=kind, used_memory_bytes=memory,
                                    sm_utilization_ratio=ratio,
                                    values={} if active is None else {LAST_ACTIVE: active}))
    return tuple(processes)


def newest_samples(samples: Iterable[Any], last_seen: int) -> tuple[dict[int, float], int, int]:
    """Per-pid SM utilisation (0..1) from the newest sample of each pid, the new last-seen,
    and how many samples could not be read (skipped: one odd sample never fails the GPU).

    Values are clamped to 0..100 % first: zombie contexts have been seen reporting garbage.
    """
    best: dict[int, tuple[int, float]] = {}
    newest = last_seen
    unreadable = 0
    for sample in samples:
        try:
            pid, stamp, sm = int(sample.pid), int(sample.timeStamp), int(sample.smUtil)
        except (AttributeError, TypeError, ValueError, OverflowError):
            unreadable += 1
            continue
        newest = max(newest, stamp)
        previous = best.get(pid)
        if previous is None or stamp >= previous[0]:
            best[pid] = (stamp, min(max(sm, 0), 100) / 100.0)
    return {pid: ratio for pid, (_, ratio) in best.items()}, newest, unreadable


def process_utilization_call(nvml: ModuleType) -> Callable[[Any, int], Sequence[Any]] | None:
    """``nvmlDeviceGetProcessUtilization`` with NOT_FOUND (no samples) turned into ``()``.

    The returned callable raises ``nvml.NVMLError`` for every other failure.
    """
    fn = getattr(nvml, "nvmlDeviceGetProcessUtilization", None)
    if fn is None:
        return None

    def read(handle: Any, last_seen: int) -> Sequence[Any]:
        try:
            return fn(handle, last_seen)  # type: ignore[no-any-return]
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) == NOT_FOUND:
                return ()
            raise

    return read
