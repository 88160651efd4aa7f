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
from dataclasses import dataclass

from exporter.attribution.podresources.allocations import AllocationTable
from exporter.snapshot import AllocationRow

EXCLUSIVE = "exclusive"
SHARED = "shared"


@dataclass(frozen=True, slots=True)
class MigDeviceRef:
    """What the join needs to know about one MIG device the source read."""

    gpu_index: int
    parent_uuid: str
    gpu_instance: int
    uuid: str  # MIG-<uuid>


def join_allocations(
    table: AllocationTable,
    gpus: Iterable[tuple[int, str]],
    mig_devices: Iterable[MigDeviceRef] = (),
) -> tuple[AllocationRow, ...]:
    """Rows for every allocation in ``table`` (unique); ``gpus`` are (index, UUID) pairs."""
    whole = {uuid: index for index, uuid in gpus}
    migs = {mig.uuid: mig for mig in mig_devices}
    rows: list[AllocationRow] = []
    for allocation in table.allocations:
        device = allocation.device
        gpu = uuid = gpu_instance = ""
        mig = migs.get(device.device)
        if mig is not None:
            gpu, uuid, gpu_instance = str(mig.gpu_index), mig.parent_uuid, str(mig.gpu_instance)
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
