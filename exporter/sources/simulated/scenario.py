"""Scenarios for the simulated source: a small YAML format, strict validation, bundled presets.

A scenario describes one host: its GPUs and the processes that come and go on them. Times are
seconds of *simulated* time relative to the moment the source starts (negative = already
running); they also accept ``30s``, ``15m``, ``2h``, ``3d``. Sizes are bytes or strings such as
``512MiB``, ``1.5GiB``, ``40GB``. Top level keys::

    name: str                  # optional, defaults to the file name
    description: str           # optional
    hostname: str              # optional, the hostname the snapshot reports
    driver_version: str        # optional, default "580.95.05"
    cuda_driver_version: str   # optional, default "13.0"
    exporter_flags: [--slurm]  # optional: the flags to run it with (README, live tests)
    gpus:                      # required, at least one
      - model: NVIDIA H100 80GB HBM3     # required, one of GPU_MODELS
        count: 1                         # repeat this entry (default 1)
        idle_celsius: 32                 # temperature with no load
        full_load_celsius: 72            # steady temperature at 100 % load (bad cooling: higher)
        thermal_time_constant: 60s       # thermal lag (first-order)
        power_limit_watts: 700           # enforced limit (default: the model's default limit)
        ecc_corrected_per_hour: 0        # corrected ECC errors per hour of simulated time
        ecc_uncorrected: [{at: 2m, count: 1}]   # injected uncorrected errors
        lost_at: 5m                      # from then on the GPU is lost (up=0, "GPU is lost")
        xids: [{at: 20s, code: 79}]      # XIDs (count, every, gpu_instance, compute_instance)
        xid_events: true                 # false: NVML refuses XID event registration
        remapped_rows: {corrected: 2, uncorrected: 1, pending_from: 40s, failure_from: 5m}
        retired_pages: {single_bit: 3, double_bit: 1, pending_from: 1m}   # before Ampere
        mig: [{profile: 1g.18gb, gpu_instance: 7, compute_instances: 1}]  # MIG on
    processes:
      - gpu: 0                 # GPU index, or a list: one rank per GPU, pids pid, pid+1, ...
        pid: 4242              # optional (default derived from the position)
        user: alice            # required
        uid: 1001              # optional (root -> 0, else derived from the name)
        name: python3          # process name (comm)
        type: compute          # compute | graphics | compute+graphics
        start: -3d             # when it starts (default 0)
        stop: 1h               # when it exits (default: never)
        memory: 20GiB          # memory after the ramp (includes the ~500 MiB CUDA context)
        ramp: 30s              # time to grow from the context to ``memory`` (default 0)
        leak_per_second: 0     # growth after the ramp; at the GPU's total it "OOMs", exits
        utilization: 0.9       # mean SM busy ratio (0..1); 0 = idle (memory held, no kernels)
        utilization_jitter: 0.05
        memory_utilization: 0.4   # memory-bandwidth busy ratio at full utilisation
        restart_after: 1m      # after exiting (stop or OOM) it starts again with pid + 101
        kernels:               # optional: what its kernels do while they run (GPM, Hopper+)
          sm: 1.0              # share of the SMs they keep busy (0.01: one block spinning)
          occupancy: 0.15      # resident warps / the SMs' maximum
          tensor: 0.0          # share of their SM time on tensor cores
          precision: fp32      # fp16 | bf16 | tf32 | fp8 | fp32 | fp64 | int8
        pod: {namespace: ml, pod: trainer-0, container: pytorch}   # optional Kubernetes pod
                               # (a process runs in one workload: pod, slurm_job, container
                               # or workload)
        torch:                 # optional: the process runs the PyTorch allocator publisher
          cache: 0.1           # share of the allocator's reserve that is cache, not tensors
          fragmentation: 0.02  # inactive split bytes as a share of the reserve
          retries_per_hour: 0  # allocation retries (cache flushes) per hour of its life
          ooms: [{at: 20s, count: 1}]   # out-of-memory errors the program catches
        gpu_instance: 7        # on a MIG GPU: the GPU instance it runs in (required there)
        compute_instance: 0    # and the compute instance (default 0)

The health keys (XIDs, memory repair, MIG) are described in
``exporter.sources.simulated.health``.
        slurm_job: "913377"    # optional Slurm job id (what its cgroup would say)
        container: {name: triton, id: <64 hex>}   # optional container outside Kubernetes
        workload: {kind: slurm, slurm_job: "913377"}   # any workload kind, by its labels
    allocations:               # optional: what the kubelet's PodResources API reports
      - gpu: 3                 # GPU index
        namespace: ml
        pod: sweep-1
        container: worker
        resource: nvidia.com/gpu   # default nvidia.com/gpu
        replica: 0             # time-slicing replica (the device id gets "::0"): shared
        claim: {name: gpus}    # a DRA claim instead of a device plugin: namespace (the pod's),
                               # driver (gpu.nvidia.com), pool (the host), device (gpu-<gpu>)
      - gpu: 7                 # or what Slurm's prolog wrote (/run/gpustat/<GPU-uuid>)
        slurm_job: "913520"
        user: dave             # the job's owner
        uid: 2004              # optional (as for processes)

Any mistake (unknown key, wrong type, negative size, unknown model, a process on a GPU that does
not exist) raises ``ScenarioError`` with one line naming the file and the field.

``load_scenario`` also accepts ``synthetic:GxP`` (``synthetic_fleet(G, P)``: a generated fleet of
G GPUs x P processes for benchmarks and load tests).
"""

from __future__ import annotations

import hashlib
import random
import re
import uuid
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from exporter.boundedyaml import MAX_BYTES, YamlLimitError, load_bounded
from exporter.catalogue import workloads
from exporter.catalogue.workloads import container_labels
from exporter.files import describe, read_file
from exporter.snapshot import DraClaim, ProcessType, Workload
from exporter.sources.simulated import list_presets
from exporter.sources.simulated.gpu_models import GPU_MODELS, GpuModel
from exporter.sources.simulated.health import HEALTH_KEYS, HealthSpec, parse_health
from exporter.sources.simulated.scenario_fields import Reader, ScenarioError, items, kind

__all__ = [
    "GPU_MODELS",
    "AllocationSpec",
    "Burst",
    "GpuModel",
    "GpuSpec",
    "ProcessSpec",
    "Scenario",
    "ScenarioError",
    "list_presets",
    "load_scenario",
    "parse_scenario",
    "synthetic_fleet",
]

MiB = 1 << 20
GiB = 1 << 30
CONTEXT_BYTES = 512 * MiB  # what a CUDA context alone costs (research: ~520-590 MiB)


@dataclass(frozen=True, slots=True)
class Burst:
    """``count`` events (injected uncorrected ECC errors, caught OOMs) at simulated second
    ``at``."""

    at: float
    count: int


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One ``gpus`` entry: the model and how it heats, draws power, counts ECC errors and
    fails."""

    index: int
    model: GpuModel
    idle_celsius: float = 32.0
    full_load_celsius: float = 72.0
    thermal_time_constant: float = 60.0
    power_limit_watts: float | None = None  # None: the model's default limit
    ecc_corrected_per_hour: float = 0.0
    ecc_uncorrected: tuple[Burst, ...] = ()
    lost_at: float | None = None
    health: HealthSpec = field(default_factory=HealthSpec)


@dataclass(frozen=True, slots=True)
class TorchSpec:
    """PyTorch allocator figures a process publishes: its memory minus the CUDA context is the
    allocator's reserve, of which ``cache`` is freed blocks kept for reuse."""

    cache: float = 0.1
    fragmentation: float = 0.02
    retries_per_hour: float = 0.0
    ooms: tuple[Burst, ...] = ()  # out-of-memory errors the program caught


#: Precision -> (tensor-core pipe, non-tensor pipe) its arithmetic runs on (GPM's pipes).
PRECISIONS: dict[str, tuple[str, str]] = {
    "fp16": ("hmma", "fp16"), "bf16": ("hmma", "fp16"), "tf32": ("hmma", "fp32"),
    "fp8": ("hmma", "fp16"), "fp32": ("hmma", "fp32"), "fp64": ("dfma", "fp64"),
    "int8": ("imma", "integer"),
}


@dataclass(frozen=True, slots=True)
class KernelSpec:
    """What a process's kernels do while they run, as GPM counts it."""

    sm: float = 1.0  # share of the SMs they keep busy
    occupancy: float = 0.15  # resident warps / maximum (large matrix products: 0.12-0.14)
    tensor: float = 0.0  # share of their SM time on tensor cores
    precision: str = "fp32"


@dataclass(frozen=True, slots=True)
class AllocationSpec:
    """One ``allocations`` entry: the pod container the kubelet gave a GPU to, or the Slurm
    job (and its owner) the prolog wrote an allocation file for."""

    gpu: int
    namespace: str = ""
    pod: str = ""
    container: str = ""
    resource: str = "nvidia.com/gpu"
    replica: int | None = None
    claim: DraClaim | None = None  # allocated through a DRA claim
    slurm_job: str = ""
    user: str = ""
    uid: int | None = None


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    """One ``processes`` entry: a process's life on a GPU, its memory, utilisation and
    kernels."""

    gpu: int
    pid: int
    user: str
    uid: int
    name: str = "python3"
    type: ProcessType = ProcessType.COMPUTE
    start: float = 0.0
    stop: float | None = None
    memory_bytes: int = 2 * GiB
    ramp: float = 0.0
    leak_per_second: float = 0.0
    utilization: float = 0.0
    utilization_jitter: float = 0.0
    memory_utilization: float = 0.4
    restart_after: float | None = None
    workload: Workload | None = None  # what its cgroup would say
    torch: TorchSpec | None = None
    gpu_instance: int | None = None  # MIG GPU instance (on a MIG GPU)
    compute_instance: int | None = None
    kernels: KernelSpec = KernelSpec()


@dataclass(frozen=True, slots=True)
class Scenario:
    """A parsed scenario file: the GPUs, processes and pod allocations of one host."""

    name: str
    gpus: tuple[GpuSpec, ...]
    processes: tuple[ProcessSpec, ...] = ()
    allocations: tuple[AllocationSpec, ...] = ()
    description: str = ""
    hostname: str | None = None
    driver_version: str = "580.95.05"
    cuda_driver_version: str = "13.0"
    exporter_flags: tuple[str, ...] = ()  # the exporter's flags the scenario is meant for
    origin: str = "<code>"  # file path or "preset NAME": used in messages


# --- parsing -----------------------------------------------------------------------------------
_TOP = ("name", "description", "hostname", "driver_version", "cuda_driver_version", "gpus",
        "processes", "allocations", "exporter_flags")
_GPU = ("model", "count", "idle_celsius", "full_load_celsius", "thermal_time_constant",
        "power_limit_watts", "ecc_corrected_per_hour", "ecc_uncorrected", "lost_at",
        *HEALTH_KEYS)
_PROC = ("gpu", "pid", "user", "uid", "name", "type", "start", "stop", "memory", "ramp",
         "leak_per_second", "utilization", "utilization_jitter", "memory_utilization",
         "restart_after", "pod", "gpu_instance", "compute_instance", "slurm_job", "container",
         "workload", "torch", "kernels")
_KERNELS = ("sm", "occupancy", "tensor", "precision")
_WORKLOAD_KEYS = ("pod", "slurm_job", "container", "workload")
_TORCH = ("cache", "fragmentation", "retries_per_hour", "ooms")
_CONTAINER = ("name", "id")
_ALLOCATION = ("gpu", "namespace", "pod", "container", "resource", "replica", "claim",
               "slurm_job", "user", "uid")
_CLAIM = ("name", "namespace", "driver", "pool", "device")
_CONTAINER_ID = re.compile(r"^[0-9a-f]{64}$")


def parse_scenario(data: object, origin: str, default_name: str = "scenario") -> Scenario:
    """Validate already-parsed YAML data and build a ``Scenario``.

    Raises:
        ScenarioError: any invalid field; the message names ``origin`` and the field.
    """
    top = Reader(data, origin, "", _TOP)
    gpus: list[GpuSpec] = []
    entries = items(top.raw("gpus", required=True), top, "gpus")
    if not entries:
        top.fail("needs at least one GPU", "gpus")
    for i, entry in enumerate(entries):
        gpus.extend(_parse_gpu(Reader(entry, origin, f"gpus[{i}]", _GPU), len(gpus)))
    processes: list[ProcessSpec] = []
    for i, entry in enumerate(items(top.raw("processes"), top, "processes")):
        processes.extend(_parse_process(Reader(entry, origin, f"processes[{i}]", _PROC), i, gpus))
    allocations = [
        _parse_allocation(Reader(entry, origin, f"allocations[{i}]", _ALLOCATION), gpus,
                          top.text("hostname") or "node")
        for i, entry in enumerate(items(top.raw("allocations"), top, "allocations"))
    ]
    seen: set[tuple[int, int]] = set()
    for proc in processes:
        if (proc.gpu, proc.pid) in seen:
            top.fail(f"pid {proc.pid} appears twice on GPU {proc.gpu}", "processes")
        seen.add((proc.gpu, proc.pid))
    scenario = Scenario(
        name=top.text("name", default_name) or default_name,
        description=top.text("description", "") or "",
        hostname=top.text("hostname"),
        driver_version=top.text("driver_version", "580.95.05") or "",
        cuda_driver_version=top.text("cuda_driver_version", "13.0") or "",
        gpus=tuple(gpus), processes=tuple(processes), allocations=tuple(allocations),
        exporter_flags=_flags(top), origin=origin,
    )
    _check_fits(scenario, top)
    return scenario


def _parse_allocation(r: Reader, gpus: list[GpuSpec], hostname: str) -> AllocationSpec:
    gpu = r.integer("gpu", 0, low=0)
    if not r.has("gpu") or gpu >= len(gpus):
        r.fail(f"needs the index of one of the scenario's {len(gpus)} GPUs", "gpu")
    if r.has("slurm_job"):
        for key in ("namespace", "pod", "container", "resource", "replica", "claim"):
            if r.has(key):
                r.fail("a Slurm job's allocation has no pod fields", key)
        user = r.text("user", required=True) or ""
        return AllocationSpec(gpu=gpu, slurm_job=r.text("slurm_job", required=True) or "",
                              resource="gres/gpu", user=user,
                              uid=r.integer("uid", _default_uid(user), high=(1 << 32) - 2))
    for key in ("user", "uid"):
        if r.has(key):
            r.fail("only a Slurm job's allocation (slurm_job) names a user", key)
    replica = r.integer("replica", 0, low=0) if r.has("replica") else None
    namespace = r.text("namespace", required=True) or ""
    claim = None
    if r.has("claim"):
        sub = Reader(r.raw("claim"), r.origin, f"{r.path}.claim", _CLAIM)
        claim = DraClaim(sub.text("namespace", namespace) or namespace,
                         sub.text("name", required=True) or "",
                         sub.text("driver", "gpu.nvidia.com") or "gpu.nvidia.com",
                         sub.text("pool", hostname) or hostname,
                         sub.text("device", f"gpu-{gpu}") or f"gpu-{gpu}")
    return AllocationSpec(
        gpu=gpu, namespace=namespace,
        pod=r.text("pod", required=True) or "",
        container=r.text("container", required=True) or "",
        resource=r.text("resource", "nvidia.com/gpu") or "nvidia.com/gpu", replica=replica,
        claim=claim,
    )


def _flags(top: Reader) -> tuple[str, ...]:
    flags = items(top.raw("exporter_flags"), top, "exporter_flags")
    for flag in flags:
        if not isinstance(flag, str) or not re.fullmatch(r"--[a-z][a-z0-9._-]*", flag):
            top.fail(f"expected flags such as --slurm, got {flag!r}", "exporter_flags")
    return tuple(flags)


def _default_uid(user: str) -> int:
    """A user's uid when the scenario gives none: root's 0, else one derived from the name."""
    return 0 if user == "root" else 1000 + sum(map(ord, user)) % 8000


def _parse_gpu(r: Reader, first_index: int) -> list[GpuSpec]:
    model_name = r.text("model", required=True) or ""
    model = GPU_MODELS.get(model_name)
    if model is None:
        r.fail(f"unknown GPU model {model_name!r} (known: {', '.join(GPU_MODELS)})", "model")
    count = r.integer("count", 1, low=1)
    if first_index + count > 64:
        r.fail("a scenario holds at most 64 GPUs", "count")
    idle = r.number("idle_celsius", 32.0, low=-20.0, high=110.0)
    spec = GpuSpec(
        index=first_index, model=model, idle_celsius=idle,
        full_load_celsius=r.number("full_load_celsius", 72.0, low=idle, high=130.0),
        thermal_time_constant=r.seconds("thermal_time_constant", 60.0) or 1.0,
        power_limit_watts=(r.number("power_limit_watts", model.power_limit_watts, low=1.0,
                                    high=model.power_limit_watts)
                           if r.has("power_limit_watts") else None),
        ecc_corrected_per_hour=r.number("ecc_corrected_per_hour", 0.0),
        ecc_uncorrected=_bursts(r, "ecc_uncorrected"),
        lost_at=r.seconds("lost_at", None),
        health=parse_health(r, model.memory_bytes, model.row_remapping, model.mig,
                            model.nvlink_links),
    )
    return [replace(spec, index=first_index + k) for k in range(count)]


def _parse_process(r: Reader, position: int, gpus: list[GpuSpec]) -> list[ProcessSpec]:
    raw_gpu = r.raw("gpu", required=True)
    targets = raw_gpu if isinstance(raw_gpu, list) else [raw_gpu]
    if not targets:
        r.fail("needs at least one GPU index", "gpu")
    for target in targets:
        if isinstance(target, bool) or not isinstance(target, int):
            r.fail(f"expected a GPU index or a list of them, got {kind(target)}", "gpu")
        if not 0 <= target < len(gpus):
            have = "GPU 0" if len(gpus) == 1 else f"GPUs 0-{len(gpus) - 1}"
            r.fail(f"GPU {target} does not exist (the scenario has {have})", "gpu")
    user = r.text("user", required=True) or ""
    default_uid = _default_uid(user)
    type_text = r.text("type", "compute") or "compute"
    try:
        ptype = ProcessType(type_text)
    except ValueError:
        r.fail(f"unknown type {type_text!r} (allowed: compute, graphics, compute+graphics)", "type")
    start = r.seconds("start", 0.0, negative=True) or 0.0
    stop = r.seconds("stop", None, negative=True)
    if stop is not None and stop <= start:
        r.fail(f"must be after start ({start:g} s), got {stop:g} s", "stop")
    torch = _parse_torch(Reader(r.raw("torch"), r.origin, f"{r.path}.torch", _TORCH)) \
        if r.has("torch") else None
    kernels = _parse_kernels(Reader(r.raw("kernels"), r.origin, f"{r.path}.kernels", _KERNELS)) \
        if r.has("kernels") else KernelSpec()
    memory = r.size("memory", 2 * GiB)
    base_pid = r.integer("pid", 4000 + 211 * position, low=1, high=(1 << 22) - len(targets))
    common: dict[str, Any] = {
        "user": user, "uid": r.integer("uid", default_uid, high=(1 << 32) - 2),
        "name": r.text("name", "python3") or "python3", "type": ptype,
        "start": start, "stop": stop, "memory_bytes": memory,
        "ramp": r.seconds("ramp", 0.0) or 0.0,
        "leak_per_second": float(r.size("leak_per_second", 0)),
        "utilization": r.number("utilization", 0.0, high=1.0),
        "utilization_jitter": r.number("utilization_jitter", 0.0, high=1.0),
        "memory_utilization": r.number("memory_utilization", 0.4, high=1.0),
        "restart_after": r.seconds("restart_after", None), "torch": torch,
        "workload": _parse_workload(r), "kernels": kernels,
    }
    gi = r.integer("gpu_instance", 0) if r.has("gpu_instance") else None
    ci = r.integer("compute_instance", 0) if gi is not None else None
    if gi is None and r.has("compute_instance"):
        r.fail("needs gpu_instance", "compute_instance")
    for target in targets:
        capacity = gpus[target].model.memory_bytes
        mig = gpus[target].health.mig
        if mig is not None:
            instance = next((spec for spec in mig if spec.gpu_instance == gi), None)
            if instance is None:
                known = ", ".join(str(spec.gpu_instance) for spec in mig)
                r.fail(f"GPU {target} is in MIG mode: name one of its GPU instances ({known})",
                       "gpu_instance")
            assert ci is not None
            if ci >= instance.compute_instances:
                r.fail(f"GPU instance {gi} has {instance.compute_instances} compute instance(s)",
                       "compute_instance")
            capacity = instance.memory_bytes
        elif gi is not None:
            r.fail(f"GPU {target} is not in MIG mode", "gpu_instance")
        if memory > capacity:
            r.fail(f"{memory / GiB:.1f} GiB do not fit GPU {target} ({capacity / GiB:.1f} GiB)",
                   "memory")
    return [ProcessSpec(gpu=g, pid=base_pid + rank, gpu_instance=gi, compute_instance=ci,
                        **common) for rank, g in enumerate(targets)]


def _parse_workload(r: Reader) -> Workload | None:
    """The workload of a process: ``workload`` (any kind, by its labels) or one of the
    shorthands ``pod``, ``slurm_job`` and ``container``, with the identifiers their cgroups
    would give (the same pod's processes share its UID)."""
    given = [key for key in _WORKLOAD_KEYS if r.has(key)]
    if len(given) > 1:
        r.fail(f"a process runs in one workload: give one of {', '.join(given)}", given[1])
    if r.has("pod"):
        kubernetes = workloads.KUBERNETES
        sub = Reader(r.raw("pod"), r.origin, f"{r.path}.pod", kubernetes.labels)
        labels = {key: sub.text(key, required=True) or "" for key in kubernetes.labels}
        digest = hashlib.sha256("/".join(labels.values()).encode()).hexdigest()
        pod_uid = uuid.uuid5(uuid.NAMESPACE_URL, f"{labels['namespace']}/{labels['pod']}")
        return Workload(kubernetes.name, labels, {"pod_uid": str(pod_uid), "container_id": digest})
    if r.has("slurm_job"):
        job = r.text("slurm_job") or ""
        return Workload(workloads.SLURM.name, dict.fromkeys(workloads.SLURM.labels, job))
    if r.has("container"):
        sub = Reader(r.raw("container"), r.origin, f"{r.path}.container", _CONTAINER)
        name, container_id = (sub.text(key, required=True) or "" for key in _CONTAINER)
        if not _CONTAINER_ID.match(container_id):
            sub.fail("must be 64 lower-case hex characters", "id")
        return Workload(workloads.CONTAINERS.name, container_labels(container_id, name),
                        {"container_id": container_id, "runtime": "docker"})
    if r.has("workload"):
        return _parse_any_workload(r)
    return None


def _parse_any_workload(r: Reader) -> Workload:
    """``workload: {kind: <name>, <label>: <value>, ...}`` for any kind in the table."""
    data, path = r.raw("workload"), f"{r.path}.workload"
    keys = tuple(str(key) for key in data) if isinstance(data, dict) else ()
    name = Reader(data, r.origin, path, keys).text("kind", required=True)
    kind_row = next((row for row in workloads.KINDS if row.name == name), None)
    if kind_row is None:
        known = ", ".join(row.name for row in workloads.KINDS)
        r.fail(f"unknown workload kind {name!r} (known: {known})", "workload.kind")
    sub = Reader(data, r.origin, path, ("kind", *kind_row.labels))
    labels = {label: sub.text(label, "") or "" for label in kind_row.labels}
    if not any(labels.values()):
        sub.fail(f"names none of the {kind_row.name} labels ({', '.join(kind_row.labels)})")
    return Workload(kind_row.name, labels)


def _bursts(r: Reader, key: str, *, negative: bool = False) -> tuple[Burst, ...]:
    """The ``[{at, count}, ...]`` list under ``key``, in time order."""
    bursts = []
    for j, item in enumerate(items(r.raw(key), r, key)):
        sub = Reader(item, r.origin, f"{r.path}.{key}[{j}]", ("at", "count"))
        bursts.append(Burst(at=sub.seconds("at", 0.0, negative=negative) or 0.0,
                            count=sub.integer("count", 1, low=1)))
    return tuple(sorted(bursts, key=lambda burst: burst.at))


def _parse_torch(r: Reader) -> TorchSpec:
    return TorchSpec(
        cache=r.number("cache", 0.1, high=1.0),
        fragmentation=r.number("fragmentation", 0.02, high=1.0),
        retries_per_hour=r.number("retries_per_hour", 0.0),
        ooms=_bursts(r, "ooms", negative=True),
    )


def _parse_kernels(r: Reader) -> KernelSpec:
    precision = r.text("precision", "fp32") or "fp32"
    if precision not in PRECISIONS:
        r.fail(f"unknown precision {precision!r} (allowed: {', '.join(PRECISIONS)})",
               "precision")
    return KernelSpec(
        sm=r.number("sm", 1.0, high=1.0),
        occupancy=r.number("occupancy", 0.15, high=1.0),
        tensor=r.number("tensor", 0.0, high=1.0),
        precision=precision,
    )


def _check_fits(scenario: Scenario, top: Reader) -> None:
    """Steady processes alive at the same time must fit their GPU (a leak may not share one).

    At each process start, the processes alive (started, and not yet stopped for good) must
    fit. One sweep over start and end times per GPU: O(n log n), not a pass per process
    (10,000 processes took 13 s).
    """
    by_gpu: dict[int, list[ProcessSpec]] = {}
    for proc in scenario.processes:
        by_gpu.setdefault(proc.gpu, []).append(proc)
    for gpu in scenario.gpus:
        procs = by_gpu.get(gpu.index, [])
        if sum(1 for p in procs if p.leak_per_second > 0) > 1:
            top.fail(f"GPU {gpu.index} has more than one leaking process", "processes")
        starts = sorted((p.start, p.memory_bytes) for p in procs)
        ends = sorted((p.stop, p.memory_bytes) for p in procs
                      if p.stop is not None and p.restart_after is None)
        used, ended, end_at = gpu.model.reserved_bytes, 0, 0
        for i, (start, memory) in enumerate(starts):
            used += memory
            while end_at < len(ends) and ends[end_at][0] <= start:
                ended += ends[end_at][1]
                end_at += 1
            if i + 1 < len(starts) and starts[i + 1][0] == start:
                continue  # count every process starting at this instant first
            if used - ended > gpu.model.memory_bytes:
                top.fail(f"processes on GPU {gpu.index} need {(used - ended) / GiB:.1f} GiB at "
                         f"t={start:g} s, more than its {gpu.model.memory_bytes / GiB:.1f} "
                         "GiB", "processes")


# --- loading ---------------------------------------------------------------------------------
def _preset_dir() -> Any:
    return resources.files("exporter.sources.simulated").joinpath("scenarios")


_SYNTHETIC_RE = re.compile(r"^synthetic:(\d+)x(\d+)$")


def load_scenario(name_or_path: str, seed: int = 0) -> Scenario:
    """Load a bundled preset by name, ``synthetic:GxP`` (``synthetic_fleet(G, P, seed)``), or a
    file.

    Raises:
        ScenarioError: unknown preset and no such file, unreadable file, bad YAML, bad field.
    """
    synthetic = _SYNTHETIC_RE.match(name_or_path)
    if synthetic:
        return synthetic_fleet(int(synthetic.group(1)), int(synthetic.group(2)), seed=seed)
    if name_or_path in list_presets():
        text = _preset_dir().joinpath(f"{name_or_path}.yaml").read_text(encoding="utf-8")
        origin, stem = f"preset {name_or_path}", name_or_path
    else:
        path = Path(name_or_path)
        try:
            # A FIFO, a device or a file over the YAML bound is refused without being read.
            text = read_file(name_or_path, MAX_BYTES).decode("utf-8")
        except FileNotFoundError:
            raise ScenarioError(f"{name_or_path}: no such scenario: neither a bundled preset "
                                f"({', '.join(list_presets())}) nor a file") from None
        except OSError as exc:
            raise ScenarioError(f"{path}: cannot read: {describe(exc)}") from None
        except UnicodeDecodeError:
            raise ScenarioError(f"{path}: cannot read: not UTF-8 text") from None
        origin, stem = str(path), path.stem
    try:
        data = load_bounded(text)  # no aliases, bounded depth, nodes and size
    except YamlLimitError as exc:
        where, _, problem = str(exc).partition(": ")
        if where.startswith("line ") and problem:
            raise ScenarioError(f"{origin}: {where}: invalid YAML: {problem}") from None
        raise ScenarioError(f"{origin}: invalid YAML: {exc}") from None
    return parse_scenario(data, origin, stem)


def synthetic_fleet(gpus: int = 8, processes_per_gpu: int = 32, seed: int = 0,
                    model: str = "NVIDIA H100 80GB HBM3") -> Scenario:
    """A large, busy, churning fleet for benchmarks and load tests (no YAML involved).

    Each GPU holds ``processes_per_gpu`` processes of 8 users; memory stays under ~75 %; one in
    eight processes exits and restarts every few minutes so PIDs churn.

    Raises:
        ScenarioError: unknown model or counts out of range (gpus 1..64, processes 0..1024).
    """
    if model not in GPU_MODELS:
        raise ScenarioError(f"synthetic_fleet: model: unknown GPU model {model!r}")
    if not 1 <= gpus <= 64 or not 0 <= processes_per_gpu <= 1024:
        raise ScenarioError("synthetic_fleet: gpus must be 1..64 and processes_per_gpu 0..1024")
    spec = GPU_MODELS[model]
    rng = random.Random(f"synthetic-fleet/{seed}")
    budget = int(spec.memory_bytes * 0.72) // max(1, processes_per_gpu)
    procs: list[ProcessSpec] = []
    for g in range(gpus):
        for k in range(processes_per_gpu):
            user = f"user{(g + k) % 8}"
            churn = k % 8 == 7
            procs.append(ProcessSpec(
                gpu=g, pid=10000 + g * 2000 + k * 3, user=user, uid=2000 + (g + k) % 8,
                name=("python3", "torchrun", "jupyter-kernel", "vllm")[k % 4],
                start=-rng.uniform(60, 86400), memory_bytes=int(budget * rng.uniform(0.5, 1.0)),
                stop=rng.uniform(30, 300) if churn else None,
                restart_after=rng.uniform(5, 30) if churn else None,
                utilization=rng.uniform(0.0, 1.6 / max(1, processes_per_gpu)),
                utilization_jitter=0.3 / max(1, processes_per_gpu),
            ))
    return Scenario(
        name=f"synthetic-{gpus}x{processes_per_gpu}",
        description="programmatic fleet for benchmarks", hostname="sim-fleet",
        gpus=tuple(GpuSpec(index=i, model=spec) for i in range(gpus)),
        processes=tuple(procs), origin="synthetic_fleet",
    )
