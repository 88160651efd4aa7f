"""The snapshot: plain, immutable dataclasses that every stage after a source reads.

Data flows one way: a source (NVML or simulated) builds a ``Snapshot``; enrichers return a
new ``Snapshot`` with owners and workloads filled in (``dataclasses.replace``);
exposition (Prometheus collector, JSON, page) only reads it.

Conventions:
- Units are base units: bytes, ratios in 0..1, degrees Celsius, watts, hertz, joules, seconds.
- ``None`` means "not supported or not available on this GPU": exposition leaves the series
  out. A source never substitutes 0 or NaN for a value it could not read.
- Times are Unix seconds (``time.time()`` or the simulated clock).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType

from exporter.catalogue.metrics import SM_ACTIVE, UTILIZATION, Value
from exporter.frozeninit import slot_init
from exporter.health import MigDevice, XidKey, XidStat


class ProcessType(str, Enum):
    """Which NVML process list(s) a process was found in."""

    COMPUTE = "compute"
    GRAPHICS = "graphics"
    COMPUTE_GRAPHICS = "compute+graphics"


@dataclass(frozen=True, slots=True)
class ProcessOwner:
    """Who runs a process, resolved from ``/proc/<pid>`` and a passwd file."""

    uid: int
    user: str  # passwd name, or str(uid) when the passwd file has no entry
    name: str  # process name (``comm``)
    start_time_seconds: float  # Unix time the process started
    cmdline: str | None = None  # only filled when the user opted in (it may hold secrets)


@dataclass(frozen=True, slots=True)
class Workload:
    """The workload a process runs in (a Kubernetes pod's container, a Slurm job, a container),
    as its cgroup names it.

    ``kind`` is the name of a workload kind (``exporter.catalogue.workloads``); ``labels``
    maps each of that kind's label names to its value ("" where unknown); ``ids`` is what
    else the cgroup named (a pod's UID, a full container ID, the runtime), for the JSON API.
    """

    kind: str
    labels: Mapping[str, str]
    ids: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DraClaim:
    """The Dynamic Resource Allocation claim behind an allocation, as the kubelet reports it."""

    namespace: str  # the ResourceClaim's namespace
    name: str  # the ResourceClaim's name
    driver: str  # e.g. gpu.nvidia.com
    pool: str  # the driver's pool (NVIDIA's driver: the node's name)
    device: str  # the device in the pool, e.g. gpu-0


@dataclass(frozen=True, slots=True)
class AllocationRow:
    """One device the kubelet allocated to one container, or Slurm to one job (label values;
    "" = unknown, or another kind's). The workload fields are named as the labels of
    ``exporter.catalogue.metrics.ALLOCATION_WORKLOAD_LABELS``."""

    gpu: str  # index of the (parent) GPU on this host
    uuid: str  # the (parent) GPU's UUID
    device_id: str  # the device's id without a replica suffix: GPU-..., MIG-...
    gpu_instance: str  # MIG GPU instance id
    resource: str  # e.g. nvidia.com/gpu, nvidia.com/mig-1g.18gb, gres/gpu
    namespace: str
    pod: str
    container: str
    sharing: str  # "exclusive" or "shared" (time-sliced/MPS replicas, several containers)
    claim: DraClaim | None = None  # the DRA claim that allocated it (None: a device plugin)
    slurm_job: str = ""  # the Slurm job id (the prolog's allocation file)
    user: str = ""  # the job owner's user name (its uid where the passwd file has none)
    uid: str = ""


@dataclass(frozen=True, slots=True)
class PodResourcesHealth:
    """Outcome of the last poll of the kubelet's PodResources API."""

    up: bool
    status: str  # exporter.attribution.podresources.client.PollStatus value
    error: str | None = None


@slot_init  # built on every collection: see exporter.frozeninit
@dataclass(frozen=True, slots=True)
class GpuProcess:
    """One process holding a context on one GPU."""

    pid: int  # host PID, as NVML reports it
    type: ProcessType
    used_memory_bytes: int | None  # what the driver handed out (context + framework cache)
    sm_utilization_ratio: float | None = None  # from process-utilisation samples; None if no sample
    owner: ProcessOwner | None = None  # None until enrichment (or if the process vanished)
    workload: Workload | None = None  # from its cgroup; None for host processes
    values: Mapping[str, float] = field(default_factory=dict)  # further per-process metrics
    gpu_instance: int | None = None  # MIG GPU instance it runs in (None without MIG)
    compute_instance: int | None = None  # MIG compute instance within that GPU instance


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """Static facts read once per GPU."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    memory_total_bytes: int
    serial: str | None = None
    vbios_version: str | None = None
    power_limit_default_watts: float | None = None
    minor_number: int | None = None  # N of /dev/nvidiaN (DRA drivers and Jobstats name GPUs by it)


@slot_init  # built on every collection: see exporter.frozeninit
@dataclass(frozen=True, slots=True)
class GpuReading:
    """Everything read from one GPU in one collection.

    ``values`` holds the per-GPU metrics by metric name (``exporter.catalogue.metrics``, rows with
    ``Scope.GPU``): a number, or for a metric with one extra label a mapping from that label's
    value to a number; ``exporter.attribution.torchtotals`` adds the per-user PyTorch counters
    (user -> count). A metric that was not read (group off, unsupported, failed) is absent.
    ``up`` is False when the GPU could not be read at all (lost, reset required, hung); then
    ``error`` says why and ``values`` is empty.
    ``xids``: XIDs counted since the exporter started (group ``xid``), by code and, under MIG,
    the instance NVML attributed them to. ``mig``: the MIG devices when MIG is on (group
    ``mig``), None when off or not read; their processes are in ``processes`` too.
    """

    identity: GpuIdentity
    up: bool = True
    error: str | None = None
    values: Mapping[str, Value] = field(default_factory=dict)
    processes: tuple[GpuProcess, ...] = ()  # processes that exited are simply absent
    xids: Mapping[XidKey, XidStat] = field(default_factory=lambda: MappingProxyType({}))
    mig: tuple[MigDevice, ...] | None = None

    def value(self, name: str) -> float | None:
        """The value of scalar metric ``name``, or None when absent."""
        found = self.values.get(name)
        return found if isinstance(found, (int, float)) else None

    def labelled(self, name: str) -> Mapping[str, float] | None:
        """The values of labelled metric ``name`` by label value, or None when absent."""
        found = self.values.get(name)
        return found if isinstance(found, Mapping) else None


def gpu_activity(reading: GpuReading) -> float | None:
    """How busy the GPU really was: SM activity where GPM reports it, else utilisation (None:
    neither was read). The alerts' recorded activity is the same choice, in PromQL."""
    found = reading.value(SM_ACTIVE.name)
    return reading.value(UTILIZATION.name) if found is None else found


@dataclass(frozen=True, slots=True)
class AccountingRow:
    """Running totals of one user's processes on this host (one pod's, one Slurm job's where
    those labels are on), integrated over the collections since the exporter started.

    ``workload`` maps the accounting labels of the workload kinds switched on to this row's
    values ("" for processes of no such workload). ``totals`` maps a ``Scope.ACCOUNTING``
    metric name to its counter value (byte-seconds, GPU-seconds, joules); a total that could
    not be measured (no power reading) is absent.
    """

    user: str
    workload: Mapping[str, str] = field(default_factory=dict)
    totals: Mapping[str, float] = field(default_factory=dict)
    since: float | None = None  # Unix seconds the row's totals count from


@slot_init  # built on every collection: see exporter.frozeninit
@dataclass(frozen=True, slots=True)
class Snapshot:
    """One collection across all GPUs of this host.

    ``source_up`` is False when the source itself is down (NVML library missing, init failed):
    then ``gpus`` is empty and ``source_error`` says why.
    ``errors`` counts problems met during this collection by kind (for example
    ``{"garbled_process_entry": 2, "gpu_lost": 1}``); the scheduler accumulates them into
    the ``gpu_exporter_errors_total`` counter. ``booted_at`` (the host's boot) and
    ``started_at`` (the source's start) are Unix seconds.
    """

    source: str  # "nvml" or "simulated"
    hostname: str
    taken_at: float  # Unix seconds when the collection started
    duration_seconds: float
    source_up: bool = True
    source_error: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # e.g. "12.4"
    nvml_version: str | None = None
    gpus: tuple[GpuReading, ...] = ()
    errors: Mapping[str, int] = field(default_factory=dict)
    allocations: tuple[AllocationRow, ...] = ()  # the kubelet's and Slurm's device allocations
    pod_resources: PodResourcesHealth | None = None  # None when PodResources is not polled
    accounting: tuple[AccountingRow, ...] = ()  # filled by exporter.attribution.accounting
    #: Where counters count from (their OpenMetrics ``_created``): NVML's since-the-driver-
    #: loaded counters from about the host's boot, the source's own from its start.
    booted_at: float | None = None
    started_at: float | None = None
