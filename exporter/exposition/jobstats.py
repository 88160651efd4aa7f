"""The ``jobstats`` group: per GPU and MIG device, the series Jobstats' tools query, under the
plazonic exporter's names, units and labels (rows in ``exporter.catalogue.metrics.jobstats``).

Every row of the group has the same labels (``ordinal``, ``minor_number``, ``uuid``, ``name``,
``GPU_I_ID``, ``jobid``, ``userid``), because Jobstats joins them on all labels
(``nvidia_gpu_duty_cycle and nvidia_gpu_jobId == 123``). ``jobid``/``userid`` are those of the
Slurm allocation of the device (``Snapshot.allocations`` rows with a ``slurm_job``), empty
(absent in Prometheus) while no job holds it. A MIG device is a series of its own with its MIG
UUID and GPU instance, its own memory, and its parent's power and temperature; it has no duty
cycle (NVML has no utilisation under MIG). Values are the native rows' (``Alias``), scaled.
"""

from __future__ import annotations

from collections.abc import Mapping

from exporter.catalogue.metrics import (
    JOBSTATS_ROWS,
    MEMORY_TOTAL,
    MEMORY_USED,
    UTILIZATION,
    Group,
    Value,
)
from exporter.exposition.families import FamilyData, family
from exporter.snapshot import AllocationRow, Snapshot

__all__ = ["jobstats_families"]


def _holders(snapshot: Snapshot) -> dict[str, AllocationRow]:
    """Device id (a GPU's or MIG device's UUID) -> the Slurm allocation holding it."""
    holders: dict[str, AllocationRow] = {}
    for row in snapshot.allocations:
        if row.slurm_job and row.uuid:
            holders.setdefault(row.device_id, row)
    return holders


def _number(text: str) -> float | None:
    return float(text) if text.isdigit() else None


def jobstats_families(snapshot: Snapshot, groups: frozenset[Group]) -> list[FamilyData]:
    """The ``jobstats`` families (empty without the group); families without samples left
    out."""
    if Group.JOBSTATS not in groups:
        return []
    holders = _holders(snapshot)
    found = [family(row) for row in JOBSTATS_ROWS]
    for gpu in snapshot.gpus:
        if not gpu.up:
            continue
        identity = gpu.identity
        ordinal = str(identity.index)
        minor = "" if identity.minor_number is None else str(identity.minor_number)
        devices: list[tuple[str, str, str, Mapping[str, Value]]] = [
            (identity.uuid, identity.name, "", gpu.values)]
        for mig in gpu.mig or ():
            own: dict[str, Value] = {  # no duty cycle under MIG; memory of its own
                name: value for name, value in gpu.values.items()
                if name not in (MEMORY_USED.name, MEMORY_TOTAL.name, UTILIZATION.name)}
            if mig.memory_used_bytes is not None:
                own[MEMORY_USED.name] = mig.memory_used_bytes
            if mig.memory_total_bytes is not None:
                own[MEMORY_TOTAL.name] = mig.memory_total_bytes
            devices.append((mig.uuid, f"{identity.name} MIG {mig.profile}",
                            str(mig.gpu_instance), own))
        for uuid, name, instance, values in devices:
            holder = holders.get(uuid)
            job, uid = (holder.slurm_job, holder.uid) if holder is not None else ("", "")
            labels = (ordinal, minor, uuid, name, instance, job, uid)
            for row, target in zip(JOBSTATS_ROWS, found, strict=True):
                alias = row.alias
                assert alias is not None
                if alias.source is None:
                    value = _number(job if alias.allocation == "job_id" else uid)
                else:
                    raw = values.get(alias.source)
                    value = raw * alias.scale if isinstance(raw, (int, float)) else None
                if value is not None:
                    target.add(labels, value)
    return [result for result in found if result.rows]
