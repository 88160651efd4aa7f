"""XID and MIG families (rows with ``Scope.XID`` / ``Scope.MIG`` in
``exporter.catalogue.metrics.health``).

- ``gpu_xid_errors_total`` / ``gpu_last_xid_timestamp_seconds``: per GPU and XID code, summed /
  the latest over MIG instances; ``gpu_mig_xid_errors_total``: the XIDs NVML attributed to a MIG
  device. XID codes are in ascending order.
- MIG: one ``gpu_mig_instance_info`` and ``gpu_mig_processes`` per MIG device; memory once per
  GPU instance (its compute instances share it); memory per user per MIG device from the GPU's
  (enriched) process list; GPM activity (``exporter.catalogue.metrics.activity``) once per GPU
  instance.

Only GPUs that answered (``up``) are exposed, as for every per-GPU family.
"""

from __future__ import annotations

from collections.abc import Iterator

from exporter.catalogue import metrics
from exporter.catalogue.metrics import UNKNOWN_VALUE, Group
from exporter.catalogue.metrics.activity import PER_INSTANCE
from exporter.exposition.families import FamilyData, family, gpu_label_values
from exporter.health import XidStat
from exporter.snapshot import GpuReading, Snapshot

__all__ = ["health_families"]


#: Answering GPUs with the values of their GPU labels.
_Labelled = list[tuple[tuple[str, str], GpuReading]]


def _xid_families(gpus: _Labelled) -> Iterator[FamilyData]:
    errors = family(metrics.XID_ERRORS)
    last = family(metrics.LAST_XID)
    per_device = family(metrics.MIG_XID_ERRORS)
    for labels, gpu in gpus:  # a GPU without XIDs adds no row
        by_code: dict[int, list[XidStat]] = {}
        for key, stat in gpu.xids.items():
            by_code.setdefault(key.xid, []).append(stat)
        for code in sorted(by_code):
            stats = by_code[code]
            errors.add((*labels, str(code)), float(sum(s.count for s in stats)))
            last.add((*labels, str(code)), max(s.last_seconds for s in stats))
        attributed = sorted((k.gpu_instance, k.compute_instance or 0, k.xid, s.count)
                            for k, s in gpu.xids.items() if k.gpu_instance is not None)
        for gi, ci, code, count in attributed:
            per_device.add((*labels, str(gi), str(ci), str(code)), float(count))
    yield from (f for f in (errors, last, per_device) if f.rows)


def _mig_families(gpus: _Labelled) -> Iterator[FamilyData]:
    info = family(metrics.MIG_INFO)
    used = family(metrics.MIG_MEMORY_USED)
    total = family(metrics.MIG_MEMORY_TOTAL)
    processes = family(metrics.MIG_PROCESSES)
    users = family(metrics.MIG_USER_MEMORY)
    for labels, gpu in gpus:
        if not gpu.mig:
            continue
        memory_seen: set[int] = set()
        by_user: dict[tuple[int, int, str], float] = {}
        for process in gpu.processes:
            if process.gpu_instance is None:
                continue
            user = process.owner.user if process.owner is not None else UNKNOWN_VALUE
            key = (process.gpu_instance, process.compute_instance or 0, user)
            by_user[key] = by_user.get(key, 0.0) + float(process.used_memory_bytes or 0)
        for device in gpu.mig:
            gi, ci = str(device.gpu_instance), str(device.compute_instance)
            info.add((*labels, gi, ci, device.profile, device.uuid), 1.0)
            processes.add((*labels, gi, ci, device.profile), float(len(device.processes)))
            if device.gpu_instance not in memory_seen:
                memory_seen.add(device.gpu_instance)
                if device.memory_used_bytes is not None:
                    used.add((*labels, gi, device.profile), float(device.memory_used_bytes))
                if device.memory_total_bytes is not None:
                    total.add((*labels, gi, device.profile), float(device.memory_total_bytes))
            for (p_gi, p_ci, user), memory in sorted(by_user.items()):
                if (p_gi, p_ci) == (device.gpu_instance, device.compute_instance):
                    users.add((*labels, gi, ci, device.profile, user), memory)
    yield from (f for f in (info, used, total, processes, users) if f.rows)


def _mig_activity_families(gpus: _Labelled, groups: frozenset[Group]) -> Iterator[FamilyData]:
    """GPM figures per MIG GPU instance (``MigDevice.activity``, shared by its CIs)."""
    for gpu_row, mig_row in PER_INSTANCE:
        if mig_row.group not in groups:
            continue
        result = family(mig_row)
        for labels, gpu in gpus:
            seen: set[int] = set()
            for device in gpu.mig or ():
                value = device.activity.get(gpu_row.name)
                if value is None or device.gpu_instance in seen:
                    continue
                seen.add(device.gpu_instance)
                result.add_value((*labels, str(device.gpu_instance), device.profile), value)
        if result.rows:
            yield result


def health_families(snapshot: Snapshot, groups: frozenset[Group]) -> Iterator[FamilyData]:
    """XID families (group ``xid``) and MIG families (group ``mig``) of answering GPUs."""
    healthy = [(gpu_label_values(gpu.identity), gpu) for gpu in snapshot.gpus if gpu.up]
    if Group.XID in groups:
        yield from _xid_families(healthy)
    if Group.MIG in groups:
        yield from _mig_families(healthy)
        yield from _mig_activity_families(healthy, groups)
