"""Dynamic Resource Allocation through the kubelet's PodResources API: the claims a fake kubelet
serves on a real unix socket (the generated v1 messages, ``dynamic_resources``), joined to the
GPUs by NVIDIA's DRA device names (``gpu-<minor>``), beside device-plugin allocations."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import pytest

from exporter.allocations import DeviceId, join_allocations, parse_dra_device
from exporter.attribution.podresources.client import PodResourcesClient
from exporter.attribution.podresources.v1 import api_pb2
from exporter.catalogue import metrics
from exporter.exposition import snapshot_families
from exporter.snapshot import AllocationRow, DraClaim
from exporter.state import ExpositionOptions
from tests.exposition import factory
from tests.fixtures.kubelet import GPU, FakeKubelet, pod

NVIDIA = "gpu.nvidia.com"
GPU_A = "GPU-8f2c1e52-5a3b-4c2d-9e1f-0a1b2c3d4e5f"
GPU_B = "GPU-11112222-3333-4444-5555-666677778888"
GPU_C = "GPU-99990000-aaaa-bbbb-cccc-ddddeeeeffff"
#: (driver, pool, device, share id or None) per claimed device.
Claimed = Sequence[tuple[str, str, str, str | None]]


def dra_pod(namespace: str, name: str, container: str, claims: dict[str, Claimed],
            claim_namespace: str | None = None) -> Any:
    """A PodResources message whose container got ``claims`` (claim name -> devices)."""
    return api_pb2.PodResources(name=name, namespace=namespace, containers=[
        api_pb2.ContainerResources(name=container, dynamic_resources=[
            api_pb2.DynamicResource(
                claim_name=claim, claim_namespace=claim_namespace or namespace,
                claim_resources=[api_pb2.ClaimResource(
                    cdi_devices=[api_pb2.CDIDevice(name=f"k8s.{driver}/claim={claim}-{device}")],
                    driver_name=driver, pool_name=pool, device_name=device,
                    **({} if share is None else {"share_id": share}))
                    for driver, pool, device, share in devices])
            for claim, devices in claims.items()])])


PODS = [
    pod("ml", "plugin-0", {"main": [(GPU, [GPU_C])]}),  # a device plugin's, beside DRA
    dra_pod("ml", "pretrain-0", "trainer",
            {"pretrain-gpus": [(NVIDIA, "node-1", "gpu-0", None),
                               (NVIDIA, "node-1", "gpu-1", None)],
             "pretrain-nic": [("nic.example.com", "node-1", "nic-0", None)]}),
    dra_pod("infer", "embedder-0", "server", {"shared-gpu": [(NVIDIA, "node-1", "gpu-2", "s1")]},
            claim_namespace="shared"),
    dra_pod("research", "nb-0", "jupyter", {"mig": [(NVIDIA, "node-1", "gpu-0-mig-9-0-1", None)]}),
    dra_pod("other", "by-uuid", "c", {"x": [(NVIDIA, "node-1", GPU_B, None)]}),
    dra_pod("other", "not-here", "c", {"y": [(NVIDIA, "node-1", "gpu-7", None)]}),
]


@pytest.fixture
def socket_path() -> Iterator[str]:
    directory = tempfile.mkdtemp(prefix="kl", dir="/tmp")
    yield os.path.join(directory, "kubelet.sock")
    for name in os.listdir(directory):
        os.unlink(os.path.join(directory, name))
    os.rmdir(directory)


def _gpus() -> list[Any]:
    """Three GPUs whose minor numbers are not their indexes (the join must use the minor)."""
    return [replace(factory.reading(index), identity=replace(
        factory.identity(index), uuid=uuid, minor_number=minor))
        for index, (uuid, minor) in enumerate(((GPU_A, 2), (GPU_B, 0), (GPU_C, 1)))]


def test_claims_are_read_over_the_socket_and_joined_by_minor_number(socket_path: str) -> None:
    with FakeKubelet(socket_path, PODS):
        table, _ = PodResourcesClient(socket_path).list_allocations()
    rows = join_allocations(table, _gpus())
    by_device = {(row.pod, row.device_id): row for row in rows}
    claim = DraClaim("ml", "pretrain-gpus", NVIDIA, "node-1", "gpu-0")
    assert by_device[("pretrain-0", "gpu-0")] == AllocationRow(
        "1", GPU_B, "gpu-0", "", NVIDIA, "ml", "pretrain-0", "trainer", "exclusive", claim)
    assert by_device[("pretrain-0", "gpu-1")].uuid == GPU_C  # minor 1 is GPU index 2
    assert ("pretrain-0", "nic-0") not in by_device  # not a GPU driver
    embedder = by_device[("embedder-0", "gpu-2")]
    assert (embedder.gpu, embedder.sharing) == ("0", "shared")  # consumable capacity share
    assert embedder.claim == DraClaim("shared", "shared-gpu", NVIDIA, "node-1", "gpu-2")
    mig = by_device[("nb-0", "gpu-0-mig-9-0-1")]
    assert (mig.uuid, mig.gpu_instance) == (GPU_B, "")  # the parent; the instance is unnamed
    assert by_device[("by-uuid", GPU_B)].gpu == "1"
    assert (by_device[("not-here", "gpu-7")].gpu, by_device[("not-here", "gpu-7")].uuid) == (
        "", "")  # kept, unjoined
    plugin = by_device[("plugin-0", GPU_C)]
    assert (plugin.gpu, plugin.claim) == ("2", None)


def test_claims_are_exposed_beside_the_allocations(socket_path: str) -> None:
    with FakeKubelet(socket_path, PODS):
        table, _ = PodResourcesClient(socket_path).list_allocations()
    snapshot = factory.snapshot(*_gpus(), allocations=join_allocations(table, _gpus()))
    families = {f.metric.name: f for f in snapshot_families(snapshot, ExpositionOptions())}
    claims = families[metrics.ALLOCATION_CLAIM_INFO.name]
    labels = [dict(zip(claims.labels, values, strict=True)) for values, _ in claims.rows]
    assert len(labels) == 6  # every DRA GPU device; not the plugin's, not the NIC
    assert {(c["claim_namespace"], c["claim"], c["device"]) for c in labels} >= {
        ("ml", "pretrain-gpus", "gpu-0"), ("shared", "shared-gpu", "gpu-2")}
    allocations = families[metrics.ALLOCATION_INFO.name]
    assert len(allocations.rows) == 7  # the same six, and the device plugin's


def test_no_claims_no_claim_series() -> None:
    families = snapshot_families(factory.snapshot(*_gpus()), ExpositionOptions())
    assert metrics.ALLOCATION_CLAIM_INFO.name not in {f.metric.name for f in families}


@pytest.mark.parametrize(("name", "share", "expected"), [
    ("gpu-3", None, DeviceId("gpu-3", None, None, 3)),
    ("gpu-12-mig-19-4-1", None, DeviceId("gpu-12-mig-19-4-1", None, None, 12)),
    ("gpu-3", "a1", DeviceId("gpu-3", "a1", None, 3)),
    (GPU_A, None, DeviceId(GPU_A, None, GPU_A)),
    ("gpu-vfio-0", None, DeviceId("gpu-vfio-0", None, None, None)),
])
def test_dra_device_names(name: str, share: str | None, expected: DeviceId) -> None:
    assert parse_dra_device(name, share) == expected
