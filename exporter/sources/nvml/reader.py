"""Reading one GPU through NVML: static identity once, then the rows of the enabled groups.

Each per-GPU row (``exporter.metrics``) says how it is read: ``NvmlRead`` rows go through
``GpuReader.plain`` (one call per (function, args) per GPU read, shared by rows reading
different attributes of one struct); ``NvmlSpecial`` rows through the readers in
``exporter.sources.nvml.special``. Functions and constants are looked up once per ``start``.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from exporter.health import EventCounts, MigDevice, XidKey, XidStat
from exporter.metrics import GPU_ROWS, UNKNOWN_VALUE, Constant, Group, NvmlRead, NvmlSpecial
from exporter.snapshot import GpuIdentity, GpuProcess, GpuReading, ProcessType, Value
from exporter.sources.nvml.errors import Reaction, describe, raise_if_down
from exporter.sources.nvml.last_active import LastActive
from exporter.sources.nvml.mig import MigReader
from exporter.sources.nvml.processes import (
    ProcessLister,
    clean_entries,
    merge_processes,
    newest_samples,
    process_utilization_call,
)
from exporter.sources.nvml.special import SPECIAL_READERS

log = logging.getLogger(__name__)

@dataclass(eq=False, slots=True)
class GpuState:
    """What the source keeps per GPU index between collections."""

    index: int
    identity: GpuIdentity
    handle: Any = None  # None: not acquired yet, or dropped after the GPU was lost
    identity_known: bool = False
    error: str | None = None  # why the GPU is not answering (handle refused, lost, ...)
    unsupported: set[str] = field(default_factory=set)  # fields never to ask for again
    last_seen_timestamp: int = 0  # newest process-utilisation sample seen (microseconds)
    last_active: LastActive = field(default_factory=LastActive)  # per pid, across collections
    garbled_seen: bool = False  # garbled process entries were already reported in the log


def placeholder_identity(index: int) -> GpuIdentity:
    """Identity for a GPU whose handle could not be opened (so nothing is known about it)."""
    return GpuIdentity(index=index, uuid=UNKNOWN_VALUE, name=UNKNOWN_VALUE,
                       pci_bus_id=UNKNOWN_VALUE, memory_total_bytes=0)


def _optional(nvml: ModuleType, name: str, handle: Any) -> Any:
    fn = getattr(nvml, name, None)
    if fn is None:
        return None
    try:
        return fn(handle)
    except nvml.NVMLError as exc:
        log.debug("GPU identity field %s unavailable: %s", name, describe(exc))
        return None


def read_identity(nvml: ModuleType, index: int, handle: Any) -> GpuIdentity:
    """Static facts of one GPU.

    Raises:
        NVMLError: UUID, name, PCI info or memory total could not be read.
    """
    default_limit = _optional(nvml, "nvmlDeviceGetPowerManagementDefaultLimit", handle)
    serial = _optional(nvml, "nvmlDeviceGetSerial", handle)
    vbios = _optional(nvml, "nvmlDeviceGetVbiosVersion", handle)
    return GpuIdentity(
        index=index,
        uuid=str(nvml.nvmlDeviceGetUUID(handle)),
        name=str(nvml.nvmlDeviceGetName(handle)),
        pci_bus_id=str(nvml.nvmlDeviceGetPciInfo(handle).busId),
        memory_total_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        serial=str(serial) if serial else None,
        vbios_version=str(vbios) if vbios else None,
        power_limit_default_watts=None if default_limit is None else default_limit / 1000.0,
    )


class NvmlCalls:
    """The binding's functions and constants, resolved once per ``start``.

    A function the binding lacks is ``None``; the reader then treats the field as unsupported.
    """

    def __init__(self, nvml: ModuleType) -> None:
        self.nvml = nvml
        self.error: type[BaseException] = nvml.NVMLError
        nvml.nvmlDeviceGetMemoryInfo  # noqa: B018 - AttributeError: not nvidia-ml-py
        self.mismatch: type[BaseException] | tuple[()] = (
            getattr(nvml, "NVMLLibraryMismatchError", None) or ())
        self._functions: dict[str, Callable[..., Any] | None] = {}
        self._plans: dict[frozenset[Group], _Plan] = {}
        self.compute = ProcessLister(nvml, "Compute")
        self.graphics = ProcessLister(nvml, "Graphics")
        self.process_utilization = process_utilization_call(nvml)

    def function(self, name: str) -> Callable[..., Any] | None:
        """pynvml's ``name``, or None when the binding lacks it."""
        if name not in self._functions:
            self._functions[name] = getattr(self.nvml, name, None)
        return self._functions[name]

    def argument(self, argument: int | Constant) -> int:
        """An argument's value (a constant the binding lacks takes its nvml.h value)."""
        if isinstance(argument, Constant):
            return int(getattr(self.nvml, argument.name, argument.value))
        return argument

    def plan(self, groups: frozenset[Group]) -> _Plan:
        """The reads of ``groups`` a GPU read goes through, worked out once per set of groups:
        rows, resolved functions and arguments, and which calls two rows share."""
        found = self._plans.get(groups)
        if found is None:
            rows = tuple(row for row in GPU_ROWS if row.nvml is not None and row.group in groups)
            sites = [(row.name, label, row.nvml, tuple(self.argument(a) for a in args))
                     for row in rows if isinstance(row.nvml, NvmlRead)
                     for label, args in (row.nvml.per_label.items() if row.nvml.per_label
                                         else ((None, row.nvml.args),))]
            made = Counter((spec.functions, args) for _, _, spec, args in sites)
            plain: dict[str, list[tuple[str | None, _Read]]] = {}
            for name, label, spec, args in sites:
                key = (spec.functions, args)
                plain.setdefault(name, []).append((label, _Read(
                    spec.functions, self.function(spec.functions[0]), args,
                    key if made[key] > 1 else None, spec.attribute, spec.valid, spec.scale,
                    spec.divisor)))
            found = self._plans[groups] = _Plan(
                plain=tuple((name, tuple(reads)) for name, reads in plain.items()),
                specials=tuple(dict.fromkeys(row.nvml.name for row in rows
                                             if isinstance(row.nvml, NvmlSpecial))),
            )
        return found


@dataclass(frozen=True, slots=True)
class _Read:
    """One NVML call of a plain row (``NvmlRead``, arguments resolved) and how its result
    becomes the value. ``key`` is set when another row of the plan makes the same call (its
    result is then shared within one GPU read)."""

    functions: tuple[str, ...]
    function: Callable[..., Any] | None  # functions[0] from the binding
    args: tuple[int, ...]
    key: tuple[Any, ...] | None
    attribute: str | None
    valid: tuple[float, float] | None
    scale: float
    divisor: float


@dataclass(frozen=True, slots=True)
class _Plan:
    """Per row name its reads (label, read; label None for a single value), and the special
    readers of one set of groups."""

    plain: tuple[tuple[str, tuple[tuple[str | None, _Read], ...]], ...]
    specials: tuple[str, ...]


class GpuReader:
    """Reads GPUs for one collection, counting problems into ``errors``."""

    def __init__(self, calls: NvmlCalls, errors: dict[str, int],
                 throttle_cache: dict[int, dict[str, float]], *,
                 events: EventCounts | None = None, mig: MigReader | None = None) -> None:
        self.calls = calls
        self._error = calls.error
        self._mismatch = calls.mismatch
        self.errors = errors
        self.throttle_cache = throttle_cache
        self.events = events  # the XID waiter's counts at this collection (None: not running)
        self.mig = mig

    def count(self, kind: str, n: int = 1) -> None:
        """Add ``n`` to the ``kind`` error counter of this collection."""
        self.errors[kind] = self.errors.get(kind, 0) + n

    def call(self, gpu: GpuState, name: str, function: Callable[..., Any] | None,
             *args: Any) -> Any:
        """One NVML call for one field; None when unsupported or failed.

        ``name`` identifies the field in ``gpu.unsupported`` (asked once, then never again).

        Raises:
            GpuDown: the GPU is lost, needs a reset, or answered "unknown error".
            NvmlFatal: NVML itself stopped working.
        """
        if name in gpu.unsupported:
            return None
        if function is None:
            gpu.unsupported.add(name)
            return None
        try:
            return function(gpu.handle, *args)
        except self._mismatch:
            gpu.unsupported.add(name)
            return None
        except self._error as exc:
            if raise_if_down(exc) is Reaction.UNSUPPORTED:
                log.info("GPU %d: %s not supported (%s); not asking again",
                         gpu.index, name, describe(exc))
                gpu.unsupported.add(name)
                return None
            log.debug("GPU %d: %s failed: %s", gpu.index, name, describe(exc))
            self.count("nvml_call")
            return None

    def call_newest(self, gpu: GpuState, names: tuple[str, ...], *args: Any) -> Any:
        """``call`` on the first of ``names`` this GPU has not found unsupported."""
        for name in names:
            result = self.call(gpu, name, self.calls.function(name), *args)
            if result is not None or name not in gpu.unsupported:
                return result
        return None

    def _value(self, gpu: GpuState, read: _Read,
               memo: dict[tuple[Any, ...], Any]) -> float | None:
        """One plain read's value (None: unsupported, failed or out of range)."""
        key = read.key
        if key is not None and key in memo:
            result = memo[key]
        else:
            if len(read.functions) == 1:  # most rows: no fallback to try
                result = self.call(gpu, read.functions[0], read.function, *read.args)
            else:
                result = self.call_newest(gpu, read.functions, *read.args)
            if key is not None:
                memo[key] = result
        if result is None:
            return None
        raw = result if read.attribute is None else getattr(result, read.attribute)
        valid = read.valid
        if valid is not None and not valid[0] <= raw <= valid[1]:
            return None
        if read.scale == 1.0 and read.divisor == 1.0:
            return raw  # type: ignore[no-any-return]  # ints stay ints (counts, P-states)
        return raw * read.scale / read.divisor  # type: ignore[no-any-return]

    def read(self, gpu: GpuState, groups: frozenset[Group]) -> GpuReading:
        """Every row of the enabled ``groups`` of one GPU.

        Raises:
            GpuDown: as ``call``; the partial reading is abandoned.
            NvmlFatal: as ``call``.
        """
        values: dict[str, Value] = {}
        memo: dict[tuple[Any, ...], Any] = {}
        plan = self.calls.plan(groups)
        for name, reads in plan.plain:
            if reads[0][0] is None:  # one value
                value = self._value(gpu, reads[0][1], memo)
                if value is not None:
                    values[name] = value
                continue
            labelled: dict[str, float] = {}
            for label, read in reads:
                value = self._value(gpu, read, memo)
                if value is not None:
                    labelled[str(label)] = value
            if labelled:
                values[name] = labelled
        for special in plan.specials:
            values.update(SPECIAL_READERS[special](self, gpu))
        for name in [n for n in values if n not in _ROW_GROUPS or _ROW_GROUPS[n] not in groups]:
            del values[name]  # a special reader filled a row of a group that is off
        mig = None
        if self.mig is not None and Group.MIG in groups:
            lister = self.calls.compute if Group.PROCESSES in groups else None
            mig = self.mig.read(gpu.index, gpu.handle, self.errors, lister)
        processes: tuple[GpuProcess, ...] = ()
        if mig is not None:  # the parent's lists need privileges under MIG: use the instances'
            processes = mig_processes(mig) if Group.PROCESSES in groups else ()
        elif Group.PROCESSES in groups:
            processes = self._processes(gpu, Group.PROCESS_UTILIZATION in groups)
        return GpuReading(identity=gpu.identity, values=values, processes=processes,
                          xids=self._xids(gpu) if Group.XID in groups else {}, mig=mig)

    def _xids(self, gpu: GpuState) -> Mapping[XidKey, XidStat]:
        found = None if self.events is None else self.events.gpus.get(gpu.index)
        return {} if found is None else found.xids

    def _processes(self, gpu: GpuState, with_utilization: bool) -> tuple[GpuProcess, ...]:
        calls = self.calls
        total = gpu.identity.memory_total_bytes
        compute, bad_compute = clean_entries(
            self.call(gpu, "processes_compute", calls.compute) or (), total)
        graphics, bad_graphics = clean_entries(
            self.call(gpu, "processes_graphics", calls.graphics) or (), total)
        garbled = bad_compute + bad_graphics
        if garbled:
            log.log(logging.DEBUG if gpu.garbled_seen else logging.WARNING,
                    "GPU %d: dropped %d garbled process entries (driver R535.43-535.86?)",
                    gpu.index, garbled)
            gpu.garbled_seen = True
            self.count("garbled_process_entry", garbled)
        utilization: dict[int, float] | None = None
        active: dict[int, float] | None = None
        if with_utilization and (compute or graphics):
            samples = self.call(gpu, "process_utilization", calls.process_utilization,
                                gpu.last_seen_timestamp)
            if samples is not None:
                samples = list(samples)
                utilization, gpu.last_seen_timestamp, unreadable = newest_samples(
                    samples, gpu.last_seen_timestamp)
                if unreadable:
                    self.count("process_utilization_sample", unreadable)
                # The first call asks with timestamp 0: NVML's buffer is all a restart recovers.
                active = gpu.last_active.update(samples, compute.keys() | graphics.keys(),
                                                time.time())
        elif with_utilization:
            gpu.last_active.update((), (), time.time())  # no process left: forget them all
        return merge_processes(compute, graphics, utilization, active)


def mig_processes(devices: tuple[MigDevice, ...]) -> tuple[GpuProcess, ...]:
    """The processes of a MIG GPU, from its instances (MIG has no per-process utilisation)."""
    return tuple(sorted(
        (GpuProcess(pid=p.pid, type=ProcessType.COMPUTE, used_memory_bytes=p.used_memory_bytes,
                    gpu_instance=d.gpu_instance, compute_instance=d.compute_instance)
         for d in devices for p in d.processes),
        key=lambda p: p.pid))


_ROW_GROUPS: dict[str, Group] = {row.name: row.group for row in GPU_ROWS}
