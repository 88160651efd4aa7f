"""MIG reading against the fake NVML: instances, profiles, memory, processes, privileges."""

from __future__ import annotations

import pytest

from exporter.sources.nvml.errors import GpuDown
from exporter.sources.nvml.mig import MigProcess, MigReader, profile_from_device_name
from exporter.sources.nvml.processes import ProcessLister
from tests.sources.fake_nvml import FakeProcess
from tests.sources.fake_nvml_health import FakeHealthNvml, h200_health, mig_device

GiB = 1 << 30


def mig_node(privileged: bool = True) -> FakeHealthNvml:
    """GPU 0: MIG on with 1g.18gb x2 (slots 0, 2: sparse), a 3g.71gb split into two compute
    instances; GPU 1: MIG off."""
    devices = {
        0: mig_device(0, gi=7, ci=0, profile="1g.18gb", memory_total=17 * GiB,
                      memory_used=5 * GiB,
                      processes=[FakeProcess(pid=4100, used_memory=4 * GiB,
                                             gpu_instance_id=7, compute_instance_id=0)]),
        2: mig_device(0, gi=8, ci=0, profile="1g.18gb", memory_total=17 * GiB),
        3: mig_device(0, gi=2, ci=0, profile="3g.71gb", memory_total=70 * GiB,
                      memory_used=30 * GiB, compute_slices=1,
                      processes=[FakeProcess(pid=4200, used_memory=20 * GiB,
                                             gpu_instance_id=2, compute_instance_id=0)]),
        4: mig_device(0, gi=2, ci=1, profile="3g.71gb", memory_total=70 * GiB,
                      memory_used=30 * GiB, compute_slices=1,
                      processes=[FakeProcess(pid=4201, used_memory=9 * GiB,
                                             gpu_instance_id=2, compute_instance_id=1)]),
    }
    fake = FakeHealthNvml([h200_health(0, mig_mode=(1, 1), mig_devices=devices,
                                       mig_privileged=privileged),
                           h200_health(1)])
    fake.nvmlInit()
    return fake


def read(fake: FakeHealthNvml, reader: MigReader, index: int,
         errors: dict[str, int] | None = None) -> object:
    handle = fake.nvmlDeviceGetHandleByIndex(index)
    return reader.read(index, handle, {} if errors is None else errors,
                       ProcessLister(fake, "Compute"))


def test_instances_with_ids_profiles_memory_and_processes() -> None:
    fake = mig_node()
    errors: dict[str, int] = {}
    devices = MigReader(fake).read(0, fake.nvmlDeviceGetHandleByIndex(0), errors,
                                   ProcessLister(fake, "Compute"))
    assert devices is not None
    assert [(d.gpu_instance, d.compute_instance, d.profile) for d in devices] == [
        (2, 0, "3g.71gb"), (2, 1, "3g.71gb"), (7, 0, "1g.18gb"), (8, 0, "1g.18gb")]
    small = devices[2]
    assert small.uuid == fake.gpus[0].mig_devices[0].uuid
    assert small.uuid.startswith("MIG-")
    assert (small.memory_used_bytes, small.memory_total_bytes) == (5 * GiB, 17 * GiB)
    assert small.processes == (MigProcess(pid=4100, used_memory_bytes=4 * GiB),)
    assert devices[0].processes == (MigProcess(pid=4200, used_memory_bytes=20 * GiB),)
    assert devices[1].processes == (MigProcess(pid=4201, used_memory_bytes=9 * GiB),)
    assert devices[3].processes == ()
    assert errors == {}  # empty slots (1, 5, 6) are normal, not errors


def test_mig_off_gpu_costs_one_mode_query_per_handle() -> None:
    fake = mig_node()
    reader = MigReader(fake)
    for _ in range(3):
        assert read(fake, reader, 1) is None
    assert fake.calls[("nvmlDeviceGetMigMode", 1)] == 1
    assert fake.calls[("nvmlDeviceGetMaxMigDeviceCount", 1)] == 0
    reader.forget(1)  # the GPU was reset and its handle re-acquired: ask again
    read(fake, reader, 1)
    assert fake.calls[("nvmlDeviceGetMigMode", 1)] == 2


def test_gpu_without_mig_support_is_not_mig() -> None:
    fake = FakeHealthNvml([h200_health(0, mig_mode=None)])
    fake.nvmlInit()
    reader = MigReader(fake)
    assert read(fake, reader, 0) is None
    assert read(fake, reader, 0) is None
    assert fake.calls[("nvmlDeviceGetMigMode", 0)] == 1


def test_instances_are_enumerated_every_collection_and_profiles_cached() -> None:
    fake = mig_node()
    reader = MigReader(fake)
    first = read(fake, reader, 0)
    assert isinstance(first, tuple)
    assert len(first) == 4
    del fake.gpus[0].mig_devices[2]  # an instance destroyed without a reset
    second = read(fake, reader, 0)
    assert isinstance(second, tuple)
    assert [d.gpu_instance for d in second] == [2, 2, 7]
    # The profile of a known MIG UUID is not looked up again.
    assert fake.calls[("nvmlDeviceGetGpuInstanceById", 0)] == 4


def test_unprivileged_profile_comes_from_the_mig_device_name() -> None:
    fake = mig_node(privileged=False)
    reader = MigReader(fake)
    devices = read(fake, reader, 0)
    assert isinstance(devices, tuple)
    assert [d.profile for d in devices] == ["3g.71gb", "3g.71gb", "1g.18gb", "1g.18gb"]
    assert fake.calls[("nvmlDeviceGetGpuInstanceById", 0)] == 1  # NO_PERMISSION asked once


def test_lost_parent_abandons_the_reading() -> None:
    fake = mig_node()
    reader = MigReader(fake)
    read(fake, reader, 0)
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    fake.lose(0)
    with pytest.raises(GpuDown):
        reader.read(0, handle, {}, ProcessLister(fake, "Compute"))


def test_instance_destroyed_mid_read_is_skipped_without_error() -> None:
    fake = mig_node()
    fake.fail("nvmlDeviceGetGpuInstanceId", 2, gpu=0, times=1)  # INVALID_ARGUMENT: handle gone
    errors: dict[str, int] = {}
    devices = read(fake, MigReader(fake), 0, errors)
    assert isinstance(devices, tuple)
    assert len(devices) == 3
    assert errors == {}


@pytest.mark.parametrize(("name", "profile"), [
    ("NVIDIA H200 MIG 1g.18gb", "1g.18gb"),
    ("NVIDIA A100-SXM4-80GB MIG 1c.3g.40gb", "3g.40gb"),
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", "1g.10gb+me"),
    ("MIG 7g.141gb", "7g.141gb"),
    ("NVIDIA H200", None),
    ("NVIDIA MIGHTY 2", None),
])
def test_profile_from_device_name(name: str, profile: str | None) -> None:
    assert profile_from_device_name(name) == profile
