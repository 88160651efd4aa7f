"""Tests for exporter.attribution.podresources: device ids, the allocation table, the client and
the poller against a fake kubelet that serves the generated PodResources v1 API on a unix socket."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.allocations import (
    Allocation,
    AllocationRow,
    AllocationTable,
    DeviceId,
    allocations_from_pods,
    join_allocations,
    parse_device_id,
)
from exporter.attribution.podresources.client import (
    LIST_METHOD,
    SERVICE,
    PodResourcesClient,
    PodResourcesPoller,
    PollStatus,
)
from exporter.catalogue.defaults import MAX_MESSAGE_BYTES_LIMIT
from exporter.health import MigDevice
from tests.exposition import factory
from tests.fixtures.kubelet import GPU, FakeKubelet, filler, pod
from tests.scheduler_fakes import FakeClock

ROOT = Path(__file__).resolve().parents[2]
GPU_A = "GPU-8f2c1e52-5a3b-4c2d-9e1f-0a1b2c3d4e5f"
GPU_B = "GPU-11112222-3333-4444-5555-666677778888"
MIG_A = "MIG-4b1e5f4c-8f2a-5d3b-9c6e-7a8b9c0d1e2f"

PODS = [
    pod("ml", "trainer-0", {"main": [(GPU, [GPU_A])], "sidecar": [("cpu", ["0"])]}),
    pod("research", "nb-0", {"jupyter": [("nvidia.com/mig-1g.18gb", [MIG_A])]}),
    pod("sweep", "trial-1", {"worker": [("nvidia.com/gpu.shared", [f"{GPU_B}::0"])]}),
    pod("sweep", "trial-2", {"worker": [("nvidia.com/gpu.shared", [f"{GPU_B}::3"])]}),
    pod("net", "sriov-0", {"main": [("intel.com/sriov", ["0000:3b:02.0"])]}),
    pod("idle", "no-devices", {"main": []}),
]


@pytest.fixture
def socket_path() -> Iterator[str]:
    # Unix socket paths are limited to ~107 bytes: pytest's tmp_path can be longer.
    directory = tempfile.mkdtemp(prefix="kl", dir="/tmp")
    os.chmod(directory, 0o755)
    yield os.path.join(directory, "kubelet.sock")
    for name in os.listdir(directory):
        os.unlink(os.path.join(directory, name))
    os.rmdir(directory)


@pytest.fixture
def kubelet(socket_path: str) -> Iterator[FakeKubelet]:
    with FakeKubelet(socket_path, PODS, slow_seconds=3.0) as fake:
        yield fake


# --- pure parts ------------------------------------------------------------------------------
@pytest.mark.parametrize(("raw", "expected"), [
    (GPU_A, DeviceId(GPU_A, None, GPU_A)),
    (f"{GPU_A}::7", DeviceId(GPU_A, "7", GPU_A)),
    (MIG_A, DeviceId(MIG_A, None, None)),
    (f"{MIG_A}::2", DeviceId(MIG_A, "2", None)),
    (f"MIG-{GPU_A}/1/0", DeviceId(f"MIG-{GPU_A}/1/0", None, GPU_A)),
    ("nvidia0/gi2", DeviceId("nvidia0/gi2", None, None)),
    ("  ", DeviceId("", None, None)),
])
def test_parse_device_id(raw: str, expected: DeviceId) -> None:
    assert parse_device_id(raw) == expected


def test_allocations_keep_gpu_resources_only_and_mark_sharing() -> None:
    table = allocations_from_pods(PODS)
    assert [(a.device.device, a.resource, a.namespace, a.pod, a.container)
            for a in table.allocations] == [
        (GPU_B, "nvidia.com/gpu.shared", "sweep", "trial-1", "worker"),
        (GPU_B, "nvidia.com/gpu.shared", "sweep", "trial-2", "worker"),
        (GPU_A, GPU, "ml", "trainer-0", "main"),
        (MIG_A, "nvidia.com/mig-1g.18gb", "research", "nb-0", "jupyter"),
    ]
    assert table.by_device[MIG_A][0].device.is_mig
    assert table.shared(GPU_B)
    assert not table.shared(GPU_A)
    assert not table.shared("GPU-unknown")
    extra = allocations_from_pods(PODS, frozenset({"intel.com/sriov"}))
    assert "0000:3b:02.0" in extra.by_device


def test_one_replica_alone_is_still_shared_and_two_containers_on_one_gpu_are_too() -> None:
    alone = allocations_from_pods([pod("a", "p", {"c": [(GPU, [f"{GPU_A}::1"])]})])
    assert alone.shared(GPU_A)
    both = AllocationTable.of([
        Allocation(DeviceId(GPU_A, None, GPU_A), GPU, "a", "p", "c1"),
        Allocation(DeviceId(GPU_A, None, GPU_A), GPU, "a", "p", "c2"),
        Allocation(DeviceId(GPU_A, None, GPU_A), GPU, "a", "p", "c2"),  # duplicate: dropped
    ])
    assert len(both.allocations) == 2
    assert both.shared(GPU_A)


# --- the client against the fake kubelet --------------------------------------------------
def test_list_returns_the_gpu_allocations(kubelet: FakeKubelet, socket_path: str) -> None:
    table, size = PodResourcesClient(socket_path).list_allocations()
    assert table == allocations_from_pods(PODS)
    assert size > 100


def test_empty_node(kubelet: FakeKubelet, socket_path: str) -> None:
    kubelet.mode = "empty"
    table, _ = PodResourcesClient(socket_path).list_allocations()
    assert table.allocations == ()


def test_answer_over_4_mib_is_read_within_the_raised_limit(
    kubelet: FakeKubelet, socket_path: str
) -> None:
    kubelet.huge_response()  # built before the call: building 6 MiB of messages is slow
    kubelet.mode = "huge"
    table, size = PodResourcesClient(socket_path, timeout_seconds=15).list_allocations()
    assert size > 4 << 20  # over gRPC's 4 MiB default, which failed dcgm-exporter's scrape
    assert table == allocations_from_pods(PODS)


def poller_for(socket_path: str, clock: FakeClock | None = None, **client: object) -> \
        PodResourcesPoller:
    # 5 s: a call that should answer does, however loaded the machine (the slow-kubelet test
    # passes its own short timeout).
    options: dict[str, object] = {"timeout_seconds": 5.0, **client}
    return PodResourcesPoller(
        PodResourcesClient(socket_path, **options),  # type: ignore[arg-type]
        interval_seconds=5.0, stale_after_seconds=30.0, clock=clock or FakeClock(1000.0),
    )


def test_answer_over_the_limit_is_a_clear_error_and_keeps_the_last_table(
    kubelet: FakeKubelet, socket_path: str
) -> None:
    # A timeout that a loaded machine moving 6 MB does not reach: the size is what fails.
    poller = poller_for(socket_path, max_message_bytes=4 << 20, timeout_seconds=10.0)
    good = poller.poll_once()
    assert good.status is PollStatus.OK
    kubelet.huge_response()  # build it before the call (it takes longer than the timeout)
    kubelet.mode = "huge"
    state = poller.poll_once()
    assert state.status is PollStatus.TOO_LARGE
    assert "larger than max" in (state.error or "")
    assert "--kubernetes.pod-resources-max-bytes" in (state.error or "")
    assert state.table == good.table  # still fresh: kept
    assert poller.take_errors() == {"pod_resources": 1}
    assert poller.take_errors() == {}


def test_the_limit_is_bounded(socket_path: str) -> None:
    with pytest.raises(ValueError, match="between"):
        PodResourcesClient(socket_path, max_message_bytes=MAX_MESSAGE_BYTES_LIMIT + 1)
    with pytest.raises(ValueError, match="between"):
        PodResourcesClient(socket_path, max_message_bytes=0)


def test_slow_kubelet_times_out_within_the_timeout(kubelet: FakeKubelet, socket_path: str) -> None:
    kubelet.mode = "slow"
    poller = poller_for(socket_path, timeout_seconds=0.5)
    started = time.monotonic()
    state = poller.poll_once()
    assert time.monotonic() - started < 4.0  # the 0.5 s timeout, not the kubelet's 5 s
    assert state.status is PollStatus.TIMEOUT
    assert state.table is None


def test_dying_kubelet_then_restart(kubelet: FakeKubelet, socket_path: str) -> None:
    poller = poller_for(socket_path)
    assert poller.poll_once().status is PollStatus.OK
    kubelet.mode = "dying"
    state = poller.poll_once()
    assert state.status in (PollStatus.UNAVAILABLE, PollStatus.ERROR, PollStatus.TIMEOUT)
    assert state.error
    # Gone: the socket file is left behind by the stopped server or removed; either way no crash.
    assert poller.poll_once().status in (PollStatus.UNAVAILABLE, PollStatus.SOCKET_MISSING)
    kubelet.mode = "normal"
    kubelet.restart()  # new socket at the same path: the next poll reconnects by path
    assert poller.poll_once().status is PollStatus.OK


def test_rate_limited(kubelet: FakeKubelet, socket_path: str) -> None:
    kubelet.mode = "rate_limited"
    state = poller_for(socket_path).poll_once()
    assert state.status is PollStatus.REJECTED
    assert "rate limit" in (state.error or "")


def test_missing_socket_and_not_a_socket(socket_path: str) -> None:
    poller = poller_for(socket_path)
    state = poller.poll_once()
    assert state.status is PollStatus.SOCKET_MISSING
    assert socket_path in (state.error or "")
    assert poller.take_errors() == {}  # a state (not a Kubernetes node), not an error
    Path(socket_path).write_text("not a socket")
    assert poller_for(socket_path).poll_once().status is PollStatus.NOT_A_SOCKET


def test_refused_connection_on_a_stale_socket_file(socket_path: str) -> None:
    import socket  # noqa: PLC0415

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)  # bound but never listening: connect() is refused
    try:
        assert poller_for(socket_path).poll_once().status is PollStatus.UNAVAILABLE
    finally:
        listener.close()


def test_root_only_socket_is_permission_denied_for_other_users(
    kubelet: FakeKubelet, socket_path: str
) -> None:
    os.chmod(socket_path, 0o600)  # what the kubelet's umask gives: root only
    client = PodResourcesClient(socket_path)
    if os.geteuid() != 0:
        state = PodResourcesPoller(client).poll_once()
    else:  # root ignores the mode: check as an ordinary user in a forked child
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover (child)
            try:
                os.setgid(65534)
                os.setuid(65534)
                status = PodResourcesPoller(client).poll_once()
                os.write(write_end, f"{status.status.value}|{status.error}".encode())
            finally:
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end) as pipe:
            value, _, error = pipe.read().partition("|")
        os.waitpid(child, 0)
        state = type("State", (), {"status": PollStatus(value), "error": error})()
    assert state.status is PollStatus.PERMISSION_DENIED
    assert "run as root" in (state.error or "")


def test_poller_thread_polls_in_the_background_and_stops_promptly(
    kubelet: FakeKubelet, socket_path: str
) -> None:
    poller = PodResourcesPoller(PodResourcesClient(socket_path), interval_seconds=1.0)
    assert poller.state().status is PollStatus.PENDING
    poller.start()
    try:
        deadline = time.monotonic() + 10
        while poller.state().status is not PollStatus.OK and time.monotonic() < deadline:
            time.sleep(0.02)
        state = poller.state()
        assert state.status is PollStatus.OK
        assert state.table == allocations_from_pods(PODS)
        assert state.last_success_unix is not None
        assert abs(state.last_success_unix - time.time()) < 10
        calls, began = kubelet.calls, time.monotonic()
        while kubelet.calls - calls < 2:  # two more polls
            assert time.monotonic() < deadline + 10
            time.sleep(0.05)
        elapsed = time.monotonic() - began
        assert kubelet.calls - calls <= elapsed + 2  # about one call a second, not a busy loop
    finally:
        started = time.monotonic()
        poller.stop()
        assert time.monotonic() - started < 2.0


def test_table_is_dropped_once_stale(kubelet: FakeKubelet, socket_path: str) -> None:
    clock = FakeClock(1000.0)
    poller = poller_for(socket_path, clock)
    assert poller.poll_once().table is not None
    kubelet.stop()
    clock.now += 10
    assert poller.poll_once().table is not None  # 10 s old: kept through a kubelet restart
    clock.now += 25
    state = poller.state()
    assert state.table is None  # 35 s > 30 s: never served from an old answer
    assert state.status in (PollStatus.UNAVAILABLE, PollStatus.SOCKET_MISSING)
    assert state.last_success_unix is not None


def test_interval_has_a_floor(socket_path: str) -> None:
    with pytest.raises(ValueError, match="at least"):
        PodResourcesPoller(PodResourcesClient(socket_path), interval_seconds=0.1)


def test_grpc_is_imported_only_when_polling() -> None:
    code = (
        "import sys\n"
        "from exporter.attribution.podresources.client import (PodResourcesClient,\n"
        "                                                     PodResourcesPoller)\n"
        "poller = PodResourcesPoller(PodResourcesClient('/nonexistent/kubelet.sock'))\n"
        "assert 'grpc' not in sys.modules and 'google.protobuf' not in sys.modules\n"
        "poller.poll_once()  # missing socket: still no gRPC import\n"
        "assert 'grpc' not in sys.modules\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.stdout.strip() == "ok", result.stderr


def test_generated_modules_are_up_to_date() -> None:
    result = subprocess.run([sys.executable, "scripts/gen-podresources.py", "--check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr


def test_wire_path_is_the_kubelets() -> None:
    from exporter.attribution.podresources.v1 import api_pb2  # noqa: PLC0415

    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister" == SERVICE
    assert [m.name for m in service.methods] == ["List", "GetAllocatableResources", "Get"]
    list_method = service.methods_by_name[LIST_METHOD]
    assert list_method.input_type.name == "ListPodResourcesRequest"
    assert list_method.output_type.name == "ListPodResourcesResponse"
    fields = api_pb2.ContainerDevices.DESCRIPTOR.fields_by_name
    assert (fields["resource_name"].number, fields["device_ids"].number) == (1, 2)


def test_a_huge_real_sized_answer_parses_fast(kubelet: FakeKubelet, socket_path: str) -> None:
    # Not a benchmark: a bound that catches a pathological (e.g. pure-Python) parse path.
    kubelet.pods = PODS + filler(20_000)
    started = time.monotonic()
    table, size = PodResourcesClient(socket_path, timeout_seconds=10).list_allocations()
    assert size > 1 << 20
    assert len(table.allocations) == 4
    assert time.monotonic() - started < 5.0


# --- the join with the GPUs NVML sees --------------------------------------------------------
def test_join_whole_gpus_mig_devices_and_unknown_ids() -> None:
    table = allocations_from_pods([
        *PODS,
        pod("sweep", "trial-2", {"worker": [("nvidia.com/gpu.shared", [f"{GPU_B}::4"])]}),
        pod("legacy", "old-mig", {"c": [(GPU, [f"MIG-{GPU_A}/3/0"])]}),
        pod("other", "elsewhere", {"c": [(GPU, ["GPU-not-on-this-node"])]}),
    ])
    mig_parent = replace(factory.reading(2), identity=replace(
        factory.identity(2), uuid="GPU-parent-of-mig"), mig=(
        MigDevice(gpu_instance=5, compute_instance=0, uuid=MIG_A, profile="1g.18gb"),))
    rows = join_allocations(table, [
        replace(factory.reading(0), identity=replace(factory.identity(0), uuid=GPU_A)),
        replace(factory.reading(1), identity=replace(factory.identity(1), uuid=GPU_B)),
        mig_parent])
    by_pod = {(r.namespace, r.pod): r for r in rows}
    assert len(rows) == len(by_pod) == 6  # trial-2's two replicas are one row
    assert by_pod[("ml", "trainer-0")] == AllocationRow(
        "0", GPU_A, GPU_A, "", GPU, "ml", "trainer-0", "main", "exclusive")
    assert by_pod[("sweep", "trial-2")] == AllocationRow(
        "1", GPU_B, GPU_B, "", "nvidia.com/gpu.shared", "sweep", "trial-2", "worker", "shared")
    assert by_pod[("research", "nb-0")] == AllocationRow(
        "2", "GPU-parent-of-mig", MIG_A, "5", "nvidia.com/mig-1g.18gb", "research", "nb-0",
        "jupyter", "exclusive")
    assert (by_pod[("legacy", "old-mig")].gpu, by_pod[("legacy", "old-mig")].gpu_instance) == (
        "0", "3")
    assert (by_pod[("other", "elsewhere")].gpu, by_pod[("other", "elsewhere")].uuid,
            by_pod[("other", "elsewhere")].device_id) == ("", "", "GPU-not-on-this-node")
