"""Reading one GPU through NVML: static identity once, then the rows of the enabled groups.

Each per-GPU row (``exporter.catalogue.metrics``) says how it is read: the ``NvmlRead`` rows of
a set of groups are compiled once into one function (``exporter.sources.nvml.plain_reads``: one
call per (function, args) per GPU read, shared by rows reading different attributes of one
struct);
``NvmlSpecial`` rows go through the readers in ``exporter.sources.nvml.special``, GPM rows
through ``exporter.sources.nvml.gpm``, field-value rows (``NvmlFields``) through one
``nvmlDeviceGetFieldValues`` call per GPU (``exporter.sources.nvml.fields``). Functions and
constants are looked up once per ``start``. The helpers get the collection's guarded calls and
the GPU's state (``exporter.sources.nvml.device``) as arguments.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

from exporter.catalogue.metrics import GPU_ROWS, Group, NvmlFields, NvmlRead, NvmlSpecial, Value
from exporter.health import EventCounts, MigDevice, XidKey, XidStat
from exporter.snapshot import GpuIdentity, GpuProcess, GpuReading, ProcessType
from exporter.sources.nvml.device import Binding, FieldCalls, GpuState
from exporter.sources.nvml.errors import describe
from exporter.sources.nvml.fields import FieldPlan, read_fields
from exporter.sources.nvml.fields import plan as fields_plan
from exporter.sources.nvml.gpm import GpmPlan, GpmReader, Gpu
from exporter.sources.nvml.gpm import plan as gpm_plan
from exporter.sources.nvml.mig import MigReader
from exporter.sources.nvml.plain_reads import PlainRead, PlainReads, compile_plain_reads
from exporter.sources.nvml.processes import (
    ProcessLister,
    clean_entries,
    merge_processes,
    newest_samples,
    process_utilization_call,
)
from exporter.sources.nvml.special import SPECIAL_READERS

log = logging.getLogger(__name__)


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
    minor = _optional(nvml, "nvmlDeviceGetMinorNumber", handle)
    return GpuIdentity(
        index=index,
        uuid=str(nvml.nvmlDeviceGetUUID(handle)),
        name=str(nvml.nvmlDeviceGetName(handle)),
        pci_bus_id=str(nvml.nvmlDeviceGetPciInfo(handle).busId),
        memory_total_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        serial=str(serial) if serial else None,
        vbios_version=str(vbios) if vbios else None,
        power_limit_default_watts=None if default_limit is None else default_limit / 1000.0,
        minor_number=None if minor is None else int(minor),
    )


class NvmlCalls(Binding):
    """The binding resolved once per ``start`` (``Binding``), with the process listers, the
    GPM reader and the read plans of each set of groups."""

    def __init__(self, nvml: ModuleType) -> None:
        super().__init__(nvml)
        self._plans: dict[frozenset[Group], _Plan] = {}
        self.compute = ProcessLister(nvml, "Compute")
        self.graphics = ProcessLister(nvml, "Graphics")
        self.process_utilization = process_utilization_call(nvml)
        self.gpm = GpmReader(nvml)

    def plan(self, groups: frozenset[Group]) -> _Plan:
        """The reads of ``groups`` a GPU read goes through, worked out once per set of groups:
        the plain reads compiled into one function, the special readers, and the rows."""
        found = self._plans.get(groups)
        if found is None:
            rows = tuple(row for row in GPU_ROWS if row.nvml is not None and row.group in groups)
            reads = []
            for row in rows:
                if not isinstance(row.nvml, NvmlRead):
                    continue
                spec = row.nvml
                for label, args in (spec.per_label.items() if spec.per_label
                                    else ((None, spec.args),)):
                    function = self.function(spec.functions[0])
                    reads.append(PlainRead(row.name, label, spec.functions, function,
                                           tuple(self.argument(a) for a in args),
                                           spec.attribute, spec.valid, spec.scale, spec.divisor))
            found = self._plans[groups] = _Plan(
                plain=compile_plain_reads(tuple(reads)),
                specials=tuple(dict.fromkeys(row.nvml.name for row in rows
                                             if isinstance(row.nvml, NvmlSpecial))),
                rows=frozenset(row.name for row in rows),
                gpm=gpm_plan(groups, self.argument),
                fields=fields_plan(((row.name, row.nvml) for row in rows
                                    if isinstance(row.nvml, NvmlFields)), self.argument),
            )
        return found


@dataclass(frozen=True, slots=True)
class _Plan:
    """The plain reads of one set of groups, compiled, and its special readers."""

    plain: PlainReads
    specials: tuple[str, ...]
    rows: frozenset[str]  # every row of the groups (special readers may fill others)
    gpm: GpmPlan | None  # None: no GPM row is on
    fields: FieldPlan | None  # None: no field-value row is on


class GpuReader(FieldCalls):
    """Reads GPUs for one collection, counting problems into ``errors``."""

    def __init__(self, calls: NvmlCalls, errors: dict[str, int],
                 throttle_cache: dict[int, dict[str, float]], *,
                 events: EventCounts | None = None, mig: MigReader | None = None) -> None:
        super().__init__(calls, errors, throttle_cache, events=events, mig=mig)
        self.calls = calls

    def read(self, gpu: GpuState, groups: frozenset[Group]) -> GpuReading:
        """Every row of the enabled ``groups`` of one GPU.

        Raises:
            GpuDown: as ``call``; the partial reading is abandoned.
            NvmlFatal: as ``call``.
        """
        values: dict[str, Value] = {}
        plan = self.calls.plan(groups)
        plan.plain(self, gpu, values)
        rows = plan.rows
        for special in plan.specials:
            for name, value in SPECIAL_READERS[special](self, gpu).items():
                if name in rows:  # a special reader may fill rows of a group that is off
                    values[name] = value
        if plan.fields is not None:
            values.update(read_fields(self, gpu, plan.fields))
        mig = None
        if self.mig is not None and Group.MIG in groups:
            lister = self.calls.compute if Group.PROCESSES in groups else None
            mig = self.mig.read(gpu.index, gpu.handle, self.errors, lister)
        if plan.gpm is not None:
            instances = None if mig is None else sorted({d.gpu_instance for d in mig})
            activity, per_instance = self.calls.gpm.read(
                gpu.gpm, Gpu(gpu.index, gpu.handle, self.count), plan.gpm, instances)
            values.update((name, value) for name, value in activity.items() if name in rows)
            if per_instance and mig is not None:
                mig = tuple(replace(d, activity=per_instance.get(d.gpu_instance, {}))
                            for d in mig)
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
        if not compute and not graphics:  # an idle GPU: most collections of most GPUs
            if with_utilization:
                gpu.last_active.forget()  # no process left
            return ()
        utilization: dict[int, float] | None = None
        active: dict[int, float] | None = None
        if with_utilization:
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
        return merge_processes(compute, graphics, utilization, active)


def mig_processes(devices: tuple[MigDevice, ...]) -> tuple[GpuProcess, ...]:
    """The processes of a MIG GPU, from its instances (MIG has no per-process utilisation)."""
    return tuple(sorted(
        (GpuProcess(pid=p.pid, type=ProcessType.COMPUTE, used_memory_bytes=p.used_memory_bytes,
                    gpu_instance=d.gpu_instance, compute_instance=d.compute_instance)
         for d in devices for p in d.processes),
        key=lambda p: p.pid))

