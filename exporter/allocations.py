"""Device allocations as the kubelet reports them, reduced to what a GPU exporter needs.

The kubelet's PodResources ``List`` answer names, per pod container, the device ids each
device plugin handed out. For NVIDIA's device plugin (k8s-device-plugin) those ids are:

- ``GPU-<uuid>``: a whole GPU (resource ``nvidia.com/gpu``), the NVML UUID;
- ``MIG-<uuid>``: a MIG device (``nvidia.com/gpu`` under MIG strategy ``single``, or
  ``nvidia.com/mig-<profile>`` under ``mixed``), the NVML MIG device UUID (R470+); drivers
  before R470 used ``MIG-GPU-<gpu-uuid>/<gi>/<ci>``, which names its parent GPU;
- ``<id>::<n>``: replica ``n`` of a time-sliced or MPS-shared device (``sharing.timeSlicing``
  or ``sharing.mps`` in the plugin's config; resource renamed ``nvidia.com/gpu.shared`` with
  ``renameByDefault``).

This module is pure (no gRPC): the PodResources client
(``exporter.attribution.podresources.client``) converts the protobuf answer into
``Allocation`` rows with ``allocations_from_pods``, and ``join_allocations`` joins them with
the GPUs a snapshot read (the simulated source joins its scenario's allocations the same way).

The join gives one row per (device, container). Whole GPUs match on the NVML UUID. MIG devices
match on the MIG device UUID (``MIG-<uuid>``) among the MIG devices the source read, which
gives the parent GPU and the GPU instance; the pre-R470 form ``MIG-GPU-<uuid>/<gi>/<ci>`` names
both itself. A device that matches nothing (another node's id, a plugin that names devices
differently, MIG devices the source did not read) keeps its kubelet id with empty
``gpu``/``uuid``: an allocation is never dropped.

Dynamic Resource Allocation: the kubelet also lists, per container, the devices its
ResourceClaims were allocated (``dynamic_resources``: claim name and namespace, and per device
the driver, pool and device name). Devices of a GPU driver (``DRA_GPU_DRIVERS``, plus the extra
resource names configured) become allocations like a device plugin's, with the driver as
``resource``, the device name as ``device_id`` and the claim kept (``gpu_allocation_claim_info``).
NVIDIA's DRA driver names a whole GPU ``gpu-<minor>`` and a MIG device
``gpu-<minor>-mig-...`` after the GPU's minor number (``/dev/nvidia<minor>``): the join finds the
(parent) GPU by that number (the MIG GPU instance is not in the name: left empty); a device
named by its UUID joins as a device plugin's id does. A device shared through consumable
capacity (a ``share_id``) or by several containers is ``shared``.

Sharing: a device is ``shared`` when the kubelet lists it with a replica suffix (time-slicing
or MPS) or for more than one container, else ``exclusive``. Only an exclusive whole GPU's
device metrics belong to one pod; that is what the recording rules join on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from exporter.health import MigDevice
from exporter.snapshot import AllocationRow, DraClaim, GpuReading

#: Resource names counted as NVIDIA GPUs besides the ``nvidia.com/mig-`` prefix.
DEFAULT_RESOURCE_NAMES: frozenset[str] = frozenset({"nvidia.com/gpu", "nvidia.com/gpu.shared"})
#: Prefix of MIG resources under the device plugin's ``mixed`` strategy.
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
_REPLICA_SEPARATOR = "::"
EXCLUSIVE = "exclusive"
SHARED = "shared"
_LEGACY_MIG_PREFIX = "MIG-GPU-"
#: DRA drivers whose devices are NVIDIA GPUs (NVIDIA's DRA driver) besides the extra names.
DRA_GPU_DRIVERS: frozenset[str] = frozenset({"gpu.nvidia.com"})
#: NVIDIA's DRA device names: ``gpu-<minor>`` and ``gpu-<minor>-mig-...``.
_DRA_DEVICE = re.compile(r"^gpu-(\d+)(-mig-.+)?$")


@dataclass(frozen=True, slots=True)
class DeviceId:
    """A kubelet device id split into its parts."""

    device: str  # the id without a replica suffix: "GPU-...", "MIG-..." or another plugin's id
    replica: str | None = None  # "3" for "GPU-...::3" (time-slicing / MPS replicas)
    parent_uuid: str | None = None  # the GPU's UUID when the id itself names it
    parent_minor: int | None = None  # the GPU's minor number when the id names it (DRA)

    @property
    def is_mig(self) -> bool:
        """True for MIG device ids (either form, and DRA's ``gpu-<minor>-mig-...``)."""
        return self.device.startswith("MIG-") or "-mig-" in self.device


def parse_device_id(raw: str) -> DeviceId:
    """Split ``GPU-x::3`` / ``MIG-x`` / ``MIG-GPU-x/1/0`` into a ``DeviceId``. Never raises."""
    device, separator, replica = raw.strip().partition(_REPLICA_SEPARATOR)
    parent: str | None = None
    if device.startswith("GPU-"):
        parent = device
    elif device.startswith(_LEGACY_MIG_PREFIX):
        parent = device[len("MIG-") :].split("/", 1)[0]
    return DeviceId(device, replica if separator else None, parent)


def parse_dra_device(name: str, share_id: str | None = None) -> DeviceId:
    """A DRA device name as a ``DeviceId``: ``gpu-<minor>[-mig-...]`` names its GPU's minor
    number, a UUID names itself; ``share_id`` (consumable capacity) makes it a replica."""
    found = _DRA_DEVICE.match(name)
    if found is not None:
        return DeviceId(name, share_id, None, int(found.group(1)))
    parsed = parse_device_id(name)
    return DeviceId(parsed.device, share_id if share_id is not None else parsed.replica,
                    parsed.parent_uuid)


@dataclass(frozen=True, slots=True)
class Allocation:
    """One device handed to one container of one pod."""

    device: DeviceId
    resource: str  # e.g. "nvidia.com/gpu", "nvidia.com/mig-1g.18gb"; a DRA driver's name
    namespace: str
    pod: str
    container: str
    claim: DraClaim | None = None  # the DRA claim (None: a device plugin's allocation)


@dataclass(frozen=True, slots=True)
class AllocationTable:
    """Every GPU allocation on the node, indexed by device id (without replica suffix)."""

    allocations: tuple[Allocation, ...] = ()
    by_device: Mapping[str, tuple[Allocation, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, allocations: Iterable[Allocation]) -> AllocationTable:
        """Build the table, sorted, with duplicates removed."""
        rows = tuple(sorted(set(allocations), key=_sort_key))
        index: dict[str, list[Allocation]] = {}
        for row in rows:
            index.setdefault(row.device.device, []).append(row)
        return cls(rows, {device: tuple(found) for device, found in index.items()})

    def shared(self, device: str) -> bool:
        """True when ``device`` is time-sliced/MPS-replicated or held by several containers."""
        rows = self.by_device.get(device, ())
        return len(rows) > 1 or any(row.device.replica is not None for row in rows)


def _sort_key(row: Allocation) -> tuple[str, str, str, str, str, str, str]:
    claim = row.claim
    return (row.device.device, row.namespace, row.pod, row.container, row.device.replica or "",
            "" if claim is None else claim.namespace, "" if claim is None else claim.name)


# Structural view of the generated protobuf classes (keeps this module free of gRPC imports).
class _Devices(Protocol):
    resource_name: str
    device_ids: Iterable[str]


class _ClaimResource(Protocol):
    driver_name: str
    pool_name: str
    device_name: str
    share_id: str

    def HasField(self, name: str) -> bool: ...  # protobuf's name


class _DynamicResource(Protocol):
    claim_name: str
    claim_namespace: str
    claim_resources: Iterable[_ClaimResource]


class _Container(Protocol):
    name: str
    devices: Iterable[_Devices]
    dynamic_resources: Iterable[_DynamicResource]


class _Pod(Protocol):
    name: str
    namespace: str
    containers: Iterable[_Container]


def is_gpu_resource(name: str, extra_names: frozenset[str] = frozenset()) -> bool:
    """Whether a resource name denotes NVIDIA GPUs or MIG devices."""
    return (
        name in DEFAULT_RESOURCE_NAMES
        or name in extra_names
        or name.startswith(MIG_RESOURCE_PREFIX)
    )


def allocations_from_pods(
    pods: Iterable[_Pod], extra_resource_names: frozenset[str] = frozenset()
) -> AllocationTable:
    """GPU allocations of a ``ListPodResourcesResponse.pod_resources`` sequence: the device
    plugins' and the DRA claims' (drivers in ``DRA_GPU_DRIVERS`` or ``extra_resource_names``)."""
    rows: list[Allocation] = []
    for pod in pods:
        for container in pod.containers:
            for devices in container.devices:
                if not is_gpu_resource(devices.resource_name, extra_resource_names):
                    continue
                for raw in devices.device_ids:
                    device = parse_device_id(raw)
                    if device.device:
                        rows.append(Allocation(device, devices.resource_name, pod.namespace,
                                               pod.name, container.name))
            rows += _claimed(pod, container, extra_resource_names)
    return AllocationTable.of(rows)


def _claimed(pod: _Pod, container: _Container, extra_names: frozenset[str]
             ) -> Iterable[Allocation]:
    """The GPUs a container's DRA claims were allocated."""
    for claimed in container.dynamic_resources:
        for resource in claimed.claim_resources:
            driver, name = resource.driver_name, resource.device_name
            if not name or not (driver in DRA_GPU_DRIVERS or driver in extra_names):
                continue
            share = resource.share_id if resource.HasField("share_id") else None
            claim = DraClaim(claimed.claim_namespace or pod.namespace, claimed.claim_name,
                             driver, resource.pool_name, name)
            yield Allocation(parse_dra_device(name, share or None), driver, pod.namespace,
                             pod.name, container.name, claim)


def join_allocations(table: AllocationTable,
                     gpus: Iterable[GpuReading]) -> tuple[AllocationRow, ...]:
    """Rows for every allocation in ``table`` (unique), joined with the GPUs of a snapshot
    and the MIG devices read on them."""
    whole: dict[str, int] = {}
    minors: dict[int, GpuReading] = {}
    migs: dict[str, tuple[GpuReading, MigDevice]] = {}
    for reading in gpus:
        whole[reading.identity.uuid] = reading.identity.index
        if reading.identity.minor_number is not None:
            minors[reading.identity.minor_number] = reading
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
        elif device.parent_minor is not None and device.parent_minor in minors:
            identity = minors[device.parent_minor].identity  # DRA: gpu-<minor>[-mig-...]
            gpu, uuid = str(identity.index), identity.uuid
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
            claim=allocation.claim,
        ))
    # Two replicas of one GPU in one container are one row (the replica is not a label).
    return tuple(dict.fromkeys(rows))
