"""What a metric row is: name, type, group, labels, and how each source and output fills it.

A row (``Metric``) is the one declaration of a metric. Everything else follows from it:

- the NVML source reads per-GPU rows through their ``nvml`` spec (``NvmlRead`` for a plain
  call, ``NvmlGpm`` for GPU Performance Monitoring figures, ``NvmlSpecial`` for the few reads
  that are genuinely special);
- the simulated source fills the per-GPU rows it models with its own function of the
  simulated GPU's physical state, by row name (``exporter.sources.simulated.rows``);
- exposition builds one family per row (per-GPU rows generically from ``GpuReading.values``,
  per-process rows from ``process_value`` with ``fold`` for merged series);
- the JSON model of ``/api/v1/snapshot`` gets a field per row with a ``json_field``;
- docs/metrics.md's table and the dashboards' metric names come from the rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, TypeAlias

#: A per-GPU metric's value: a number, or a number per value of the metric's extra label.
Value: TypeAlias = "float | Mapping[str, float]"


class Kind(str, Enum):
    GAUGE = "gauge"
    COUNTER = "counter"
    INFO = "info"


class Group(str, Enum):
    """Collector groups, each switched with ``--collector.<group>`` / ``--no-collector.<group>``."""

    INFO = "info"
    MEMORY = "memory"
    BAR1 = "bar1"
    UTILIZATION = "utilization"
    TEMPERATURE = "temperature"
    POWER = "power"
    ENERGY = "energy"
    PCIE = "pcie"
    FAN = "fan"
    CLOCKS = "clocks"
    THROTTLE = "throttle"
    THROTTLE_TIME = "throttle_time"  # time the clocks were held back, per reason (field values)
    ECC = "ecc"
    NVLINK = "nvlink"  # NVLink errors and state per link (field values; GPUs with NVLink)
    PROCESSES = "processes"
    PROCESS_UTILIZATION = "process_utilization"
    TORCH = "torch"  # PyTorch allocator figures published by the processes themselves
    REMAPPING = "remapping"  # row remapping and page retirement (memory repair)
    XID = "xid"  # XID errors and health events, counted in the background from NVML events
    MIG = "mig"  # MIG GPU / compute instances
    GPM = "gpm"  # SM, tensor-pipe and DRAM activity from NVML's GPU Performance Monitoring
    GPM_ENGINE = "gpm_engine"  # graphics-engine activity (GPM; a costly metric of its own)
    JOBSTATS = "jobstats"  # the series Jobstats' tools query, under their names and labels
    EXPORTER = "exporter"  # self-metrics, always on


#: Groups that cost much more than the rest per GPU and are therefore off unless asked for
#: (H200: energy ~2.8 ms, PCIe ~21 ms, BAR1 ~0.36 ms, GPM's graphics-engine metric ~1.5 ms,
#: against ~0.03 ms for all default reads); torch needs the publisher in the training
#: processes and a directory shared with them; throttle time (1.6 ms per GPU on an H100, and
#: 11 series per GPU) and NVLink (5 series per link, 18 links on an H100 SXM) would grow a
#: node's series by more than a tenth.
OPT_IN_GROUPS: frozenset[Group] = frozenset({Group.ENERGY, Group.PCIE, Group.BAR1, Group.TORCH,
                                             Group.GPM_ENGINE, Group.THROTTLE_TIME,
                                             Group.NVLINK, Group.JOBSTATS})
#: Groups with ``--collector.<group>`` flags (the exporter's own metrics are always on).
SWITCHABLE_GROUPS: tuple[Group, ...] = tuple(g for g in Group if g is not Group.EXPORTER)


def default_groups() -> frozenset[Group]:
    """Every group except the expensive opt-in ones."""
    return frozenset(g for g in Group if g not in OPT_IN_GROUPS)


class Scope(str, Enum):
    """What one series of the metric describes, and so which code fills it."""

    GPU = "gpu"  # a value in ``GpuReading.values``, read by the sources from the row's specs
    GPU_STATUS = "gpu_status"  # gpu_info / gpu_up: from the reading's identity and health
    PROCESS = "process"  # one series per process, from ``process_value`` (capped, folded)
    GPU_SUMMARY = "gpu_summary"  # per GPU or per (GPU, user) from its process list
    XID = "xid"  # per (GPU, XID code) from ``GpuReading.xids`` (exposition/health.py)
    MIG = "mig"  # per MIG instance from ``GpuReading.mig`` (exposition/health.py)
    ALLOCATION = "allocation"  # one series per kubelet allocation (``Snapshot.allocations``)
    ACCOUNTING = "accounting"  # per user (pod, job) on the host, from ``Snapshot.accounting``
    JOBSTATS = "jobstats"  # per GPU and MIG device under a peer's names (exposition/jobstats.py)
    EXPORTER = "exporter"  # the exporter's own health


class Since(str, Enum):
    """Where a counter's zero lies, which is what its OpenMetrics ``_created`` says
    (``exporter.exposition.created``)."""

    DRIVER = "driver"  # NVML counts since the driver loaded: the host's boot time
    EXPORTER = "exporter"  # the exporter counts since it (its source) started
    SERIES = "series"  # each series counts from its own start (an accounting row)
    PROCESS = "process"  # the process counts since it started (its start time)
    LIFETIME = "lifetime"  # the GPU's whole life (InfoROM): no ``_created``, as none is known


class Fold(str, Enum):
    """How values of processes merged into one series combine."""

    SUM = "sum"
    SUM_RATIO = "sum_ratio"  # summed, at most 1 (shares of one sample period)
    OLDEST = "oldest"  # the smallest (start times)
    NEWEST = "newest"  # the largest (last-active times)


PREFIX = "gpu_"
SELF_PREFIX = "gpu_exporter_"

#: Labels on every per-GPU series.
GPU_LABELS: tuple[str, ...] = ("gpu", "uuid")
#: Labels of per-process series (``pid`` can be switched off; the labels of the workload kinds
#: switched on follow: ``exporter.catalogue.workloads``).
PROCESS_LABELS: tuple[str, ...] = (*GPU_LABELS, "pid", "process", "user", "uid")
#: Label value used for processes folded into the overflow series when the per-GPU cap is hit,
#: and for processes whose owner could not be resolved.
OVERFLOW_VALUE = "__overflow__"
UNKNOWN_VALUE = "unknown"

#: Base units a metric name may end in (longest first, so bytes_per_second wins over seconds).
UNITS: tuple[str, ...] = ("bytes_per_second", "bytes", "celsius", "watts", "joules", "ratio",
                          "hertz", "seconds")


class OwnerView(Protocol):
    """What per-process rows read of a process's owner (``exporter.snapshot.ProcessOwner``)."""

    @property
    def start_time_seconds(self) -> float: ...


class ProcessView(Protocol):
    """What per-process rows read of a process (``exporter.snapshot.GpuProcess`` has it)."""

    @property
    def used_memory_bytes(self) -> int | None: ...
    @property
    def sm_utilization_ratio(self) -> float | None: ...
    @property
    def owner(self) -> OwnerView | None: ...
    @property
    def values(self) -> Mapping[str, float]: ...


@dataclass(frozen=True, slots=True)
class Constant:
    """An NVML constant passed to a call: its pynvml name and its nvml.h value (used when the
    binding lacks the name)."""

    name: str
    value: int


Argument: TypeAlias = "int | Constant"


@dataclass(frozen=True, slots=True)
class NvmlRead:
    """A per-GPU metric read with plain NVML calls: ``function(handle, *args)``.

    ``functions`` lists pynvml names newest first; the next is asked once a GPU answers that
    one is unsupported. The value is ``result.<attribute>`` (or the result) times ``scale``
    (to base units). ``per_label`` is for a metric with one label after the GPU labels: label
    value -> the args of its call. One GPU read calls each (function, args) once, so rows
    reading different attributes of one struct share the call. The value is
    ``raw * scale / divisor`` (divide for milli-units so the float is exact). Values outside
    ``valid`` are left out (NVML's "unknown" markers).
    """

    functions: tuple[str, ...]
    args: tuple[Argument, ...] = ()
    attribute: str | None = None
    scale: float = 1.0
    divisor: float = 1.0
    per_label: Mapping[str, tuple[Argument, ...]] | None = None
    valid: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class NvmlSpecial:
    """A per-GPU metric whose read is genuinely special (fallbacks across struct versions,
    bitmasks): ``name`` selects a reader in ``exporter.sources.nvml.special``. One reader may
    fill several rows and runs once per GPU read."""

    name: str


@dataclass(frozen=True, slots=True)
class GpmField:
    """One GPM metric behind a row (or behind one value of its extra label), and the
    dcgm-exporter field that reports the same figure (None: dcgm-exporter has none)."""

    metric: Constant  # NVML_GPM_METRIC_* name and id
    dcgm: str | None
    label: str | None = None  # the row's extra label value (None: the row's one value)


@dataclass(frozen=True, slots=True)
class NvmlGpm:
    """A per-GPU metric from NVML's GPU Performance Monitoring (Hopper and newer): the figure
    over the window between this collection's GPM sample and the previous one.

    ``scale`` turns GPM's unit (percent, MiB/s) into the base unit; ``nvlink`` rows are read
    only on GPUs that have NVLink (GPM answers 0 for links that do not exist). A row without
    ``fields`` is the reader's status, filled whenever a GPM row is read.
    """

    fields: tuple[GpmField, ...]
    scale: float = 0.01
    nvlink: bool = False


@dataclass(frozen=True, slots=True)
class Alias:
    """A row that serves another row's value under a peer exporter's name and unit, for tools
    built on that peer: ``source``'s value times ``scale``. ``source`` None: the value is
    ``allocation``, a number of the job holding the device (``"job_id"`` or ``"uid"``)."""

    source: str | None
    scale: float = 1.0
    allocation: str = ""


@dataclass(frozen=True, slots=True)
class FieldId:
    """One NVML field value: its nvml.h name and id, and the scope (a link for per-link
    fields). The id is nvml.h's, never the binding's constant: nvidia-ml-py renumbered some
    (the clock-event durations moved from 251-253 to 269-271)."""

    name: str
    id: int
    scope: int = 0


@dataclass(frozen=True, slots=True)
class FieldRead:
    """One value of a field-value row (``label``: the value of its extra label, None: the
    row's one value): the fields that may answer it, newest first (a GPU keeps the first that
    answers), and the perf policy whose ``nvmlDeviceGetViolationStatus`` is the same counter
    (asked where no field answers)."""

    label: str | None
    fields: tuple[FieldId, ...]
    policy: Constant | None = None


@dataclass(frozen=True, slots=True)
class NvmlFields:
    """A per-GPU metric from ``nvmlDeviceGetFieldValues``: every such row of the groups
    switched on is read in one call per GPU (``exporter.sources.nvml.fields``). The value is
    the field's number divided by ``divisor``. ``nvlink`` rows are read only on GPUs with
    NVLink, for the links they have (``NVML_FI_DEV_NVLINK_LINK_COUNT``)."""

    reads: tuple[FieldRead, ...]
    divisor: float = 1.0
    nvlink: bool = False


def nvml(function: str, *args: Argument, attribute: str | None = None, scale: float = 1.0,
         divisor: float = 1.0, fallback: tuple[str, ...] = (),
         per_label: Mapping[str, tuple[Argument, ...]] | None = None,
         valid: tuple[float, float] | None = None) -> NvmlRead:
    """Shorthand for ``NvmlRead`` in the row tables (``fallback``: older functions to try)."""
    return NvmlRead((function, *fallback), args, attribute, scale, divisor, per_label, valid)


@dataclass(frozen=True, slots=True, eq=False)  # a row is its own identity
class Metric:
    """One metric family: the single declaration everything else follows from.

    ``name`` is the full exposed name (for info metrics including ``_info``; for counters
    including ``_total``). ``labels`` lists the label names in exposition order; per-process
    metrics add the labels of the workload kinds switched on and may drop ``pid``.
    ``label_values`` lists, for a per-GPU metric with one extra label, that label's values in
    exposition order (other values a source reports are left out).

    Per-GPU rows (``Scope.GPU``): ``nvml`` says how the NVML source reads it (None: not read
    from NVML; the simulator keeps its own functions, by row name), ``json_field``/``json_type``
    name its field in ``/api/v1/snapshot`` (for a labelled metric ``json_field`` may contain
    ``{}``: one field per label value; without it the field is an object keyed by label value).

    Per-process rows (``Scope.PROCESS``): ``process_value`` reads it from a process
    (``ProcessView``: a ``GpuProcess``); ``fold`` merges processes that share a series.

    ``charted`` False: no shipped dashboard shows it (otherwise a test requires one to).
    ``alias``: a compatibility row (``Scope.JOBSTATS``) serving another row's value.
    ``since`` (counters only, and every counter has one): where the counter's zero lies, which
    the OpenMetrics exposition states as the series' ``_created``.
    """

    name: str
    kind: Kind
    group: Group
    help: str
    labels: tuple[str, ...] = GPU_LABELS
    scope: Scope = Scope.GPU
    label_values: tuple[str, ...] = ()
    nvml: NvmlRead | NvmlGpm | NvmlSpecial | NvmlFields | None = None
    json_field: str | None = None
    json_type: type[float] | type[int] | type[bool] = float
    process_value: Callable[[ProcessView], float | None] | None = field(default=None,
                                                                        compare=False)
    fold: Fold = Fold.SUM
    charted: bool = True  # a shipped dashboard shows it (tests check that one does)
    alias: Alias | None = None  # Scope.JOBSTATS rows: what they serve
    since: Since | None = None  # counters: where their zero lies (their ``_created``)

    @property
    def unit(self) -> str:
        """The OpenMetrics unit: the base-unit suffix of the name ("" for unitless counts)."""
        stem = self.name.removesuffix("_total")
        return next((u for u in UNITS if stem.endswith("_" + u)), "")

    @property
    def family_name(self) -> str:
        """The name to pass to prometheus_client families (which add ``_info``/``_total``)."""
        if self.kind is Kind.INFO:
            return self.name.removesuffix("_info")
        if self.kind is Kind.COUNTER:
            return self.name.removesuffix("_total")
        return self.name
