"""Kubelet allocations joined with the GPUs NVML sees: one row per (device, container).

Whole GPUs match on the NVML UUID. MIG devices match on the MIG device UUID (``MIG-<uuid>``)
among the MIG devices the source read, which gives the parent GPU and the GPU instance; the
pre-R470 form ``MIG-GPU-<uuid>/<gi>/<ci>`` names both itself. A device that matches nothing
(another node's id, a plugin that names devices differently, MIG devices the source did not
read) keeps its kubelet id with empty ``gpu``/``uuid``: an allocation is never dropped.

Sharing: a device is ``shared`` when the kubelet lists it with a replica suffix (time-slicing
or MPS) or for more than one container, else ``exclusive``. Only an exclusive whole GPU's
device metrics belong to one pod; that is what the recording rules join on.
"""

from __future__ import annotations

from collections.abc import Iterable

from exporter.attribution.podresources.allocations import AllocationTable
from exporter.health import MigDevice
from exporter.snapshot import AllocationRow, GpuReading

EXCLUSIVE = "exclusive"
SHARED = "shared"


def join_allocations(table: AllocationTable,
                     gpus: Iterable[GpuReading]) -> tuple[AllocationRow, ...]:
    """Rows for every allocation in ``table`` (unique), joined with the GPUs of a snapshot
    and the MIG devices read on them."""
    whole: dict[str, int] = {}
    migs: dict[str, tuple[GpuReading, MigDevice]] = {}
    for reading in gpus:
        whole[reading.identity.uuid] = reading.identity.index
        migs.update((device.uuid, (reading, device)) for device in reading.mig or ())
    rows: list[AllocationRow] = []
    for allocation in table.allocations:
        device = allocation.device
        gpu = uuid = gpu_instance = ""
        found = migs.get(device.device)
        if found is not None:
            parent, mig = found
            gpu, uuid = str(parent.identity.index), parent.identity.uuid
            gpu_instance = str(mig.gpu_instance)
        elif device.parent_uuid is not None:
            uuid = device.parent_uuid
            gpu = str(whole[uuid]) if uuid in whole else ""
            if device.is_mig:  # MIG-GPU-<uuid>/<gi>/<ci>
                gpu_instance = device.device.split("/")[1] if device.device.count("/") == 2 else ""
            if not gpu:
                uuid = ""
        rows.append(AllocationRow(
            gpu=gpu,
            uuid=uuid,
            device_id=device.device,
            gpu_instance=gpu_instance,
            resource=allocation.resource,
            namespace=allocation.namespace,
            pod=allocation.pod,
            container=allocation.container,
            sharing=SHARED if table.shared(device.device) else EXCLUSIVE,
        ))
    # Two replicas of one GPU in one container are one row (the replica is not a label).
    return tuple(dict.fromkeys(rows))
