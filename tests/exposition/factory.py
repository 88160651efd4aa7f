"""Builders of snapshots and states for the exposition tests and the benchmark."""

from __future__ import annotations

from dataclasses import replace

from exporter.attribution.accounting import IdleAccounting
from exporter.attribution.torchtotals import TorchUserTotals
from exporter.attribution.workloads import WorkloadLabels
from exporter.catalogue import metrics
from exporter.catalogue.metrics import Value, allocator
from exporter.catalogue.metrics.activity import PER_INSTANCE
from exporter.catalogue.workloads import KUBERNETES
from exporter.health import MigDevice, MigProcess, XidKey, XidStat
from exporter.snapshot import (
    AllocationRow,
    DraClaim,
    GpuIdentity,
    GpuProcess,
    GpuReading,
    PodResourcesHealth,
    ProcessOwner,
    ProcessType,
    Snapshot,
    Workload,
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


def pod(namespace: str | None, name: str | None, container: str | None = None, *,
        uid: str = "uid", container_id: str | None = None) -> Workload:
    """The workload of a process in a Kubernetes pod, as enrichment fills it (a name the
    kubelet's log tree does not give: None, an empty label)."""
    labels = {"namespace": namespace or "", "pod": name or "", "container": container or ""}
    ids = {"pod_uid": uid} | ({"container_id": container_id} if container_id else {})
    return Workload(KUBERNETES.name, labels, ids)


def process(
    pid: int,
    memory: int | None,
    *,
    user: str | None = "alice",
    name: str = "python",
    utilization: float | None = 0.25,
    workload: Workload | None = None,
    start: float = 1_700_000_000.0,
    last_active: float | None = 60.0,
    torch_allocated: int | None = None,
) -> GpuProcess:
    """A process; ``last_active`` is seconds after its start that its kernels last ran (None:
    never seen; also None when per-process utilisation is off); ``torch_allocated`` adds the
    figures its allocator publisher would report (reserved = allocated + 1/8 of it as cache,
    one OOM and three retries counted)."""
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
        workload=workload,
        values={
            **({} if last_active is None or utilization is None else {
                metrics.PROCESS_LAST_ACTIVE.name: start + pid + last_active}),
            **(torch_values(torch_allocated) if torch_allocated is not None else {}),
        },
    )


def torch_values(allocated: int) -> dict[str, float]:
    """Published allocator figures of a process with ``allocated`` bytes in tensors."""
    reserved = allocated + allocated // 8
    return {
        allocator.TORCH_ALLOCATED.name: allocated, allocator.TORCH_RESERVED.name: reserved,
        allocator.TORCH_ACTIVE.name: allocated, allocator.TORCH_INACTIVE_SPLIT.name: 2 << 20,
        allocator.TORCH_PEAK_ALLOCATED.name: reserved, allocator.TORCH_ALLOC_RETRIES.name: 3,
        allocator.TORCH_OOMS.name: 1,
    }


#: Per-GPU rows by their JSON field name (how tests name a reading to override).
ROWS_BY_FIELD = {row.json_field: row for row in metrics.GPU_ROWS if row.json_field}


def reading(index: int, processes: tuple[GpuProcess, ...] = (), *, up: bool = True,
            error: str | None = None, **fields: Value | None) -> GpuReading:
    """A fully populated reading of one healthy GPU (``up=False``: no values, as a source
    gives); ``fields`` override values by JSON field name (None removes one)."""
    values: dict[str, Value] = {
        metrics.MEMORY_TOTAL.name: 141 * GIB,
        metrics.MEMORY_USED.name: 40 * GIB,
        metrics.MEMORY_FREE.name: 101 * GIB,
        metrics.MEMORY_RESERVED.name: 512 * 1024**2,
        metrics.UTILIZATION.name: 0.75,
        metrics.MEMORY_UTILIZATION.name: 0.5,
        metrics.TEMPERATURE.name: 61.0,
        metrics.POWER_USAGE.name: 450.5,
        metrics.POWER_LIMIT.name: 700.0,
        metrics.ENERGY.name: 1.5e9,
        metrics.PCIE_THROUGHPUT.name: {"rx": 1.0e9, "tx": 2.0e8},
        metrics.FAN_SPEED.name: 0.4,
        metrics.SM_CLOCK.name: 1.98e9,
        metrics.MEMORY_CLOCK.name: 2.619e9,
        metrics.GRAPHICS_CLOCK.name: 1.98e9,
        metrics.PERFORMANCE_STATE.name: 0,
        metrics.THROTTLE_ACTIVE.name: {"gpu_idle": 0.0, "sw_power_cap": 1.0},
        metrics.ECC_ERRORS.name: {"corrected": 3, "uncorrected": 0},
    }
    for row in metrics.GPU_ROWS:  # rows without a typical value above: any plausible one
        if row.name not in values:
            values[row.name] = dict.fromkeys(row.label_values, 1) if row.label_values else 1
    reading = GpuReading(identity=identity(index), up=up, error=error,
                         values=values if up else {}, processes=processes)
    return with_values(reading, **fields) if up else reading


def with_values(gpu: GpuReading, **fields: Value | None) -> GpuReading:
    """``gpu`` with values overridden by JSON field name (None removes one)."""
    values = dict(gpu.values)
    for field_name, value in fields.items():
        name = ROWS_BY_FIELD[field_name].name
        if value is None:
            values.pop(name, None)
        else:
            values[name] = value
    return replace(gpu, values=values)


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
        booted_at=1_699_000_000.0,
        started_at=1_699_999_000.5,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def state(snap: Snapshot, age: float = 1.5, **fields: object) -> ExporterState:
    base = ExporterState(
        snapshot=snap,
        data_age_seconds=age,
        stale=False,
        last_success_timestamp=snap.taken_at,
        errors_total={"garbled_process_entry": 2},
        counting_since=1_699_999_000.25,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def fleet(gpus: int = 8, processes_per_gpu: int = 32) -> Snapshot:
    """A busy host: every GPU full of processes of a few users, some in pods."""
    readings = []
    for index in range(gpus):
        procs = []
        for slot in range(processes_per_gpu):
            pid = 10_000 + index * 1000 + slot
            in_pod = pod("ml", f"train-{slot}", "main", uid=f"uid-{slot}") if slot % 2 else None
            procs.append(
                process(
                    pid,
                    (slot + 1) * 64 * 1024**2,
                    user=USERS[slot % len(USERS)],
                    name=f"worker{slot % 5}",
                    utilization=(slot % 10) / 10,
                    workload=in_pod,
                    # every fourth process publishes allocator figures (group torch)
                    torch_allocated=(slot + 1) * 32 * 1024**2 if slot % 4 == 1 else None,
                )
            )
        readings.append(reading(index, tuple(procs)))
    # The kubelet gave each GPU to one pod (the exporter's allocation series), the last one
    # through a DRA claim; of several GPUs, Slurm also gave the last one to a job (the prolog's
    # allocation file).
    allocations = tuple(
        AllocationRow(str(r.identity.index), r.identity.uuid, r.identity.uuid, "",
                      "nvidia.com/gpu", "ml", f"train-{r.identity.index}", "main", "exclusive")
        for r in readings[:-1]
    ) + tuple(
        AllocationRow(str(r.identity.index), r.identity.uuid, f"gpu-{r.identity.index}", "",
                      "gpu.nvidia.com", "ml", f"train-{r.identity.index}", "main", "exclusive",
                      DraClaim("ml", f"train-{r.identity.index}-gpu", "gpu.nvidia.com", "node-1",
                               f"gpu-{r.identity.index}"))
        for r in readings[-1:]
    ) + tuple(
        AllocationRow(str(r.identity.index), r.identity.uuid, r.identity.uuid, "", "gres/gpu",
                      "", "", "", "exclusive", slurm_job="913377", user="alice", uid="2001")
        for r in readings[-1:] if len(readings) > 1
    )
    if readings:
        readings[0] = with_health(readings[0])
    # The per-user PyTorch counters, as the exporter's enrichment adds them (first collection),
    # and idle accounting over one 15-second interval.
    first = TorchUserTotals().enrich(snapshot(*readings, allocations=allocations,
                                              pod_resources=PodResourcesHealth(True, "ok")))
    accounting = IdleAccounting(WorkloadLabels((KUBERNETES,)))
    accounting.enrich(replace(first, taken_at=first.taken_at - 15.0))
    return accounting.enrich(first)


#: GPM figures of a MIG GPU instance: every per-instance row, its label values at 0.25.
_MIG_ACTIVITY = {row.name: dict.fromkeys(row.label_values, 0.25) if row.label_values else 0.5
                 for row, _ in PER_INSTANCE}


def with_health(gpu: GpuReading) -> GpuReading:
    """``gpu`` in MIG mode (its processes spread over two MIG devices: GPU instances 2 and 7),
    with XIDs: two 79s, and a 31 NVML attributed to the MIG device GI 2 / CI 0."""
    placed = tuple(replace(p, gpu_instance=(2, 7)[i % 2], compute_instance=0)
                   for i, p in enumerate(gpu.processes))
    devices = tuple(
        MigDevice(gpu_instance=gi, compute_instance=0, uuid=f"MIG-{gi:08d}-0000-0000-0000-0000",
                  profile=profile, memory_used_bytes=sum(p.used_memory_bytes or 0 for p in placed
                                                         if p.gpu_instance == gi),
                  memory_total_bytes=size * GIB,
                  processes=tuple(MigProcess(p.pid, p.used_memory_bytes) for p in placed
                                  if p.gpu_instance == gi),
                  activity=_MIG_ACTIVITY)
        for gi, profile, size in ((2, "3g.71gb", 71), (7, "1g.18gb", 18)))
    xids = {XidKey(79): XidStat(2, 1_700_000_050.0),
            XidKey(31, 2, 0): XidStat(1, 1_700_000_060.0)}
    return replace(gpu, processes=placed, mig=devices, xids=xids)
