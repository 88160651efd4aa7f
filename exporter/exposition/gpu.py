"""Per-GPU families: ``gpu_info``/``gpu_up`` and one family per per-GPU row.

The per-GPU rows (``exporter.catalogue.metrics.GPU_ROWS``) are exposed generically from
``GpuReading.values`` (``FamilyData.add_value``: a number becomes one series, a mapping one
series per value of the row's extra label). An absent value leaves
its series out (never 0 or NaN). A GPU with ``up=False`` exposes ``gpu_info`` and ``gpu_up 0``
only, so one sick GPU neither hides nor pollutes the others.
"""

from __future__ import annotations

from collections.abc import Iterator

from exporter.catalogue import metrics
from exporter.catalogue.metrics import GPU_ROWS, Group
from exporter.exposition.families import FamilyData, family, gpu_label_values
from exporter.snapshot import Snapshot

__all__ = ["gpu_families"]


def _status(snapshot: Snapshot) -> Iterator[FamilyData]:
    info = family(metrics.GPU_INFO)
    up = family(metrics.GPU_UP)
    for gpu in snapshot.gpus:
        identity = gpu.identity
        labels = gpu_label_values(identity)
        info.add(
            (*labels, identity.name, identity.pci_bus_id, snapshot.driver_version or "",
             snapshot.cuda_driver_version or "", snapshot.hostname),
            1.0,
        )
        up.add(labels, 1.0 if gpu.up else 0.0)
    yield info
    yield up


def gpu_families(snapshot: Snapshot, groups: frozenset[Group]) -> Iterator[FamilyData]:
    """Per-GPU families of the enabled ``groups``; families without samples are left out."""
    if Group.INFO in groups:
        yield from _status(snapshot)
    healthy = [(gpu_label_values(gpu.identity), gpu.values) for gpu in snapshot.gpus if gpu.up]
    for row in GPU_ROWS:
        if row.group not in groups:
            continue
        result = family(row)
        name, add = row.name, result.add_value
        for labels, values in healthy:
            value = values.get(name)
            if value is not None:
                add(labels, value)
        if result.rows:
            yield result
