"""Builders of snapshots and states for the exposition tests and the benchmark."""

from __future__ import annotations

from dataclasses import replace

from exporter.snapshot import (
    EccCounts,
    GpuIdentity,
    GpuProcess,
    GpuReading,
    PodRef,
    ProcessOwner,
    ProcessType,
    Snapshot,
    ThrottleReasons,
)
from exporter.state import ExporterState

GIB = 1024**3
USERS = ("alice", "bob", "carol", "dave")


def identity(index: int) -> GpuIdentity:
    return GpuIdentity(
        index=index,
        uuid=f"GPU-{index:08d}-0000-0000-0000-000000000000",
        name="NVIDIA H200",
        pci_bus_id=f"00000000:{index + 0x10:02X}:00.0",
        memory_total_bytes=141 * GIB,
        serial=f"SN{index:04d}",
        vbios_version="96.00.99.00.01",
        power_limit_default_watts=700.0,
    )


def process(
    pid: int,
    memory: int | None,
    *,
    user: str | None = "alice",
    name: str = "python",
    utilization: float | None = 0.25,
    pod: PodRef | None = None,
    start: float = 1_700_000_000.0,
) -> GpuProcess:
    owner = None
    if user is not None:
        uid = 1000 + USERS.index(user) if user in USERS else 2000
        owner = ProcessOwner(uid=uid, user=user, name=name, start_time_seconds=start + pid)
    return GpuProcess(
        pid=pid,
        type=ProcessType.COMPUTE,
        used_memory_bytes=memory,
        sm_utilization_ratio=utilization,
        owner=owner,
        pod=pod,
    )


def reading(index: int, processes: tuple[GpuProcess, ...] = (), **fields: object) -> GpuReading:
    """A fully populated reading of one healthy GPU; ``fields`` override any reading."""
    base = GpuReading(
        identity=identity(index),
        memory_used_bytes=40 * GIB,
        memory_free_bytes=101 * GIB,
        memory_reserved_bytes=512 * 1024**2,
        utilization_ratio=0.75,
        memory_utilization_ratio=0.5,
        temperature_celsius=61.0,
        power_usage_watts=450.5,
        power_limit_watts=700.0,
        energy_joules=1.5e9,
        pcie_rx_bytes_per_second=1.0e9,
        pcie_tx_bytes_per_second=2.0e8,
        fan_speed_ratio=0.4,
        sm_clock_hertz=1.98e9,
        memory_clock_hertz=2.619e9,
        graphics_clock_hertz=1.98e9,
        performance_state=0,
        throttle=ThrottleReasons({"gpu_idle": False, "sw_power_cap": True}),
        ecc=EccCounts(corrected=3, uncorrected=0),
        processes=processes,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def snapshot(*gpus: GpuReading, **fields: object) -> Snapshot:
    base = Snapshot(
        source="simulated",
        hostname="node-1",
        taken_at=1_700_000_100.0,
        duration_seconds=0.012,
        driver_version="560.35.03",
        cuda_driver_version="12.6",
        nvml_version="12.560.35.03",
        gpus=gpus,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def state(snap: Snapshot, age: float = 1.5, **fields: object) -> ExporterState:
    base = ExporterState(
        snapshot=snap,
        data_age_seconds=age,
        stale=False,
        last_success_timestamp=snap.taken_at,
        errors_total={"garbled_process_entry": 2},
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def fleet(gpus: int = 8, processes_per_gpu: int = 32) -> Snapshot:
    """A busy host: every GPU full of processes of a few users, some in pods."""
    readings = []
    for index in range(gpus):
        procs = []
        for slot in range(processes_per_gpu):
            pid = 10_000 + index * 1000 + slot
            pod = (
                PodRef(pod_uid=f"uid-{slot}", namespace="ml", pod=f"train-{slot}", container="main")
                if slot % 2
                else None
            )
            procs.append(
                process(
                    pid,
                    (slot + 1) * 64 * 1024**2,
                    user=USERS[slot % len(USERS)],
                    name=f"worker{slot % 5}",
                    utilization=(slot % 10) / 10,
                    pod=pod,
                )
            )
        readings.append(reading(index, tuple(procs)))
    return snapshot(*readings)
