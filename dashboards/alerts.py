"""The alerting rules, grouped so each group can be switched off on its own.

Every alert name starts with ``Gpu``; every expression reads raw exporter metrics or recording
rules defined earlier in its own group (Prometheus evaluates a group's rules in order), so each
alert group works whether or not the recording groups are loaded. No rule reads per-process
series (the exporter sums idle processes per GPU and user), so alerts stay few (per GPU, per
user and host) and cheap at fleet scale. Thresholds come from ``exporter.thresholds``.
"""

from __future__ import annotations

from dashboards import health_alerts
from dashboards.promql import (
    GPU_LABELS,
    allocated_idle,
    num,
    reason_in,
    sel,
)
from dashboards.rules import AlertRule, RecordingRule, RuleGroup
from exporter import metrics as c
from exporter import thresholds as t
from exporter.metrics import allocator

UNCORRECTED = 'type="uncorrected"'
# On Kubernetes the instance is a pod address; the ServiceMonitor's node label says where.
_NODE = "{{ with $labels.node }} (node {{ . }}){{ end }}"
_HOST = "{{ $labels.instance }}" + _NODE
_WHERE = "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on " + _HOST
_HW_POWER_REASONS = tuple(r for r in c.POWER_THROTTLE_REASONS if r.startswith("hw_"))
_SW_POWER_REASONS = tuple(r for r in c.POWER_THROTTLE_REASONS if not r.startswith("hw_"))

used, total = c.MEMORY_USED.name, c.MEMORY_TOTAL.name
util = c.UTILIZATION.name


#: Per GPU, the leak trend the forecast alert and the users dashboard's forecast panels share:
#: seconds until the total at the trend of the last LEAK_WINDOW, and the memory expected in
#: LEAK_HORIZON_SECONDS as a share of the total.
TIME_TO_FULL = f"instance_gpu:gpu_memory_seconds_until_full:deriv{t.LEAK_WINDOW}"
MEMORY_FORECAST = (
    f"instance_gpu:gpu_memory_used:predict_linear{t.LEAK_WINDOW}_{t.LEAK_HORIZON_SECONDS}s_ratio"
)


def memory_group() -> RuleGroup:
    """Memory nearly full, and the leak forecast (its trend recorded first, for the dashboards:
    a forecast panel then reads one sample per GPU and step instead of a window)."""
    almost_full = AlertRule(
        alert="GpuMemoryAlmostFull",
        expr=f"{used} / {total} > {num(t.MEMORY_USED_RATIO)}",
        for_=t.MEMORY_USED_FOR,
        severity="warning",
        summary="GPU memory is almost full.",
        description=(
            f"{_WHERE} has {{{{ $value | humanizePercentage }}}} of its memory in use (over "
            f"{t.MEMORY_USED_RATIO:.0%} for {t.MEMORY_USED_FOR}). New allocations will fail "
            "with CUDA out-of-memory errors; see which processes and users hold it."
        ),
    )
    horizon = t.LEAK_HORIZON_SECONDS
    time_to_full = RecordingRule(
        TIME_TO_FULL, f"({total} - {used}) / deriv({used}[{t.LEAK_WINDOW}])"
    )
    forecast_ratio = RecordingRule(
        MEMORY_FORECAST, f"predict_linear({used}[{t.LEAK_WINDOW}], {horizon}) / {total}"
    )
    forecast = AlertRule(
        alert="GpuMemoryExhaustionForecast",
        expr=(
            f"{TIME_TO_FULL}\n"
            f"and {MEMORY_FORECAST} > 1\n"
            f"and predict_linear({used}[{t.LEAK_RECENT_WINDOW}], {horizon}) > {total}\n"
            f"and delta({used}[{t.LEAK_WINDOW}]) > {num(t.LEAK_MIN_GROWTH_RATIO)} * {total}\n"
        ),
        for_=t.LEAK_FOR,
        severity="warning",
        summary="GPU memory keeps growing and will run out.",
        description=(
            f"Used memory of {_WHERE} has grown steadily over the last {t.LEAK_WINDOW} and, "
            "at that rate, reaches the total in about {{ $value | humanizeDuration }}. "
            "A process is probably leaking (tensors kept alive, a growing cache)."
        ),
    )
    return RuleGroup("gpu-memory", (time_to_full, forecast_ratio, almost_full, forecast))


IDLE_MEMORY_NOW = f"instance_user:{c.USER_IDLE_MEMORY.name}:sum"
IDLE_MEMORY = f"instance_user:{c.USER_IDLE_MEMORY.name}:min_over_time{t.IDLE_AVG_WINDOW}"
USER_UTILIZATION_MAX = f"instance_user:{c.USER_UTILIZATION_MAX.name}:max"
GPU_UTILIZATION_AVG = f"instance_gpu:{util}:avg_over_time{t.IDLE_AVG_WINDOW}"


def idle_records() -> tuple[RecordingRule, ...]:
    """Per user and host (and per GPU), what the idle alerts and the fleet panels read.

    No rule reads per-process series: the exporter sums each user's idle processes per GPU
    (``gpu_user_idle_memory_bytes``: processes over ``IDLE_PROCESS_MEMORY_BYTES`` under
    ``IDLE_UTILIZATION_RATIO`` at that collection) and reports their busiest process, so the
    group's cost grows with GPUs and users, not processes. The window's minimum of the idle sum
    is memory that stayed idle for the whole window; a user whose processes are busy has a 0
    there, so the minimum sees the busy moments too.
    """
    window = t.IDLE_AVG_WINDOW
    gpus = ", ".join(c.GPU_LABELS)
    return (
        RecordingRule(IDLE_MEMORY_NOW, f"sum without ({gpus}) ({c.USER_IDLE_MEMORY.name})"),
        RecordingRule(IDLE_MEMORY, f"min_over_time({IDLE_MEMORY_NOW}[{window}])"),
        RecordingRule(
            USER_UTILIZATION_MAX, f"max without ({gpus}) ({c.USER_UTILIZATION_MAX.name})"
        ),
        RecordingRule(GPU_UTILIZATION_AVG, f"avg_over_time({util}[{window}])"),
    )


def idle_group() -> RuleGroup:
    """Memory held while nothing runs, and GPUs starved by their input.

    At most one alert per GPU (held idle, starved) and one per user and host (idle processes,
    all of a user's processes idle): never one per process. Which processes they are is on the
    node dashboard's *Idle processes* table and in ``gpu-exporter report``.
    """
    gpu_idle = AlertRule(
        alert="GpuMemoryHeldIdle",
        expr=(
            f"{used}\n"
            f"and {used} / {total} > {num(t.IDLE_GPU_MEMORY_RATIO)}\n"
            f"and {GPU_UTILIZATION_AVG} < {num(t.IDLE_UTILIZATION_RATIO)}\n"
        ),
        for_=t.IDLE_FOR,
        severity="warning",
        summary="A GPU holds memory but runs nothing.",
        description=(
            f"{_WHERE} holds {{{{ $value | humanize1024 }}}}B of memory while its utilisation "
            f"stayed under {t.IDLE_UTILIZATION_RATIO:.0%} for {t.IDLE_FOR}: a forgotten "
            "notebook or a hung job is blocking it for everyone else."
        ),
    )
    process_idle = AlertRule(
        alert="GpuProcessIdle",
        expr=f"{IDLE_MEMORY} > 0",
        for_=t.IDLE_FOR,
        severity="warning",
        summary="A user's GPU processes hold memory without using the GPU.",
        description=(
            "Processes of user {{ $labels.user }} on " + _HOST + " hold "
            "{{ $value | humanize1024 }}B of GPU memory without using it: each holds over "
            f"{num(t.IDLE_PROCESS_MEMORY_BYTES / t.GIB)} GiB and stayed under "
            f"{t.IDLE_UTILIZATION_RATIO:.0%} utilisation for {t.IDLE_AVG_WINDOW}, for "
            f"{t.IDLE_FOR}. The node dashboard's Idle processes table (or gpu-exporter report) "
            "names them; ask the user to stop them or free the memory."
        ),
    )
    user_idle = AlertRule(
        alert="GpuUserMemoryIdle",
        expr=(
            f"sum without ({', '.join(c.GPU_LABELS)}) ({c.USER_MEMORY.name}) "
            f"> {num(t.IDLE_USER_MEMORY_BYTES)}\n"
            f"and max_over_time({USER_UTILIZATION_MAX}[{t.IDLE_AVG_WINDOW}]) "
            f"< {num(t.IDLE_UTILIZATION_RATIO)}\n"
        ),
        for_=t.IDLE_FOR,
        severity="info",
        summary="A user holds GPU memory on a host while none of their processes compute.",
        description=(
            "User {{ $labels.user }} holds {{ $value | humanize1024 }}B of GPU memory on "
            + _HOST + " and none of their GPU processes there exceeded "
            f"{t.IDLE_UTILIZATION_RATIO:.0%} utilisation for {t.IDLE_FOR}."
        ),
    )
    starved_util = f"avg_over_time({util}[{t.STARVED_AVG_WINDOW}])"
    starved = AlertRule(
        alert="GpuStarved",
        expr=(
            f"{starved_util} < {num(t.STARVED_UTILIZATION_RATIO)}\n"
            f"and {starved_util} >= {num(t.IDLE_UTILIZATION_RATIO)}\n"
            f"and avg_over_time({c.POWER_USAGE.name}[{t.STARVED_AVG_WINDOW}]) "
            f"/ {c.POWER_LIMIT.name} < {num(t.STARVED_POWER_RATIO)}\n"
            f"and {c.PROCESSES.name} > 0\n"
        ),
        for_=t.STARVED_FOR,
        severity="info",
        summary="A GPU in use is starved: low utilisation and power for a long time.",
        description=(
            f"{_WHERE} has processes but averaged only {{{{ $value | humanizePercentage }}}} "
            f"utilisation and under {t.STARVED_POWER_RATIO:.0%} of its power limit for "
            f"{t.STARVED_FOR}: the job waits on the CPU, data loading or I/O, not on the GPU."
        ),
    )
    allocated = AlertRule(
        alert="GpuAllocatedIdle",
        expr=allocated_idle("", ratio=t.IDLE_UTILIZATION_RATIO, window=t.IDLE_AVG_WINDOW) + "\n",
        for_=t.IDLE_FOR,
        severity="warning",
        summary="A pod holds an allocated GPU and does nothing with it.",
        description=(
            "Pod {{ $labels.namespace }}/{{ $labels.pod }} (container {{ $labels.container }}) "
            f"was given {_WHERE} by the kubelet, and for {t.IDLE_FOR} either none of its "
            "processes was on that GPU or the GPU, its alone, stayed under "
            f"{t.IDLE_UTILIZATION_RATIO:.0%} utilisation. Nobody else can be scheduled on it."
        ),
    )
    return RuleGroup(
        "gpu-idle", (*idle_records(), gpu_idle, process_idle, user_idle, starved, allocated)
    )


def thermal_group() -> RuleGroup:
    """Temperature and clock slowdowns."""
    temp = c.TEMPERATURE.name
    high = AlertRule(
        alert="GpuTemperatureHigh",
        expr=f"{temp} > {num(t.TEMPERATURE_WARNING_CELSIUS)}",
        for_=t.TEMPERATURE_WARNING_FOR,
        severity="warning",
        summary="A GPU is running hot.",
        description=(
            f"{_WHERE} is at {{{{ $value }}}} °C (over {num(t.TEMPERATURE_WARNING_CELSIUS)} °C "
            f"for {t.TEMPERATURE_WARNING_FOR}). Check fans, airflow and the room's cooling."
        ),
    )
    critical = AlertRule(
        alert="GpuTemperatureCritical",
        expr=f"{temp} > {num(t.TEMPERATURE_CRITICAL_CELSIUS)}",
        for_=t.TEMPERATURE_CRITICAL_FOR,
        severity="critical",
        summary="A GPU is dangerously hot.",
        description=(
            f"{_WHERE} is at {{{{ $value }}}} °C (over {num(t.TEMPERATURE_CRITICAL_CELSIUS)} °C "
            f"for {t.TEMPERATURE_CRITICAL_FOR}); it is throttling hard and may shut down."
        ),
    )
    throttle = c.THROTTLE_ACTIVE
    thermal = AlertRule(
        alert="GpuThermalThrottling",
        expr=f"{sel(throttle, reason_in(c.THERMAL_THROTTLE_REASONS))} > 0",
        for_=t.THROTTLE_FOR,
        severity="warning",
        summary="A GPU slows its clocks because it is too hot.",
        description=(
            f"{_WHERE} reports clock event reason {{{{ $labels.reason }}}} for "
            f"{t.THROTTLE_FOR}: it runs slower than it could until it cools down."
        ),
    )
    hardware = AlertRule(
        alert="GpuHardwareSlowdown",
        expr=f"{sel(throttle, reason_in(_HW_POWER_REASONS))} > 0",
        for_=t.THROTTLE_FOR,
        severity="warning",
        summary="A GPU's hardware slowdown or power brake is active.",
        description=(
            f"{_WHERE} reports {{{{ $labels.reason }}}} for {t.THROTTLE_FOR}: the board "
            "halves its clocks because of an external power brake, a power-supply problem "
            "or overheating."
        ),
    )
    power_cap = AlertRule(
        alert="GpuPowerCapped",
        expr=f"{sel(throttle, reason_in(_SW_POWER_REASONS))} > 0",
        for_=t.POWER_CAP_FOR,
        severity="info",
        summary="A GPU runs at its power limit.",
        description=(
            f"{_WHERE} has been held at its power limit ({{{{ $labels.reason }}}}) for "
            f"{t.POWER_CAP_FOR}. Normal for heavy jobs; if the limit was lowered, raise it."
        ),
    )
    return RuleGroup("gpu-thermal", (high, critical, thermal, hardware, power_cap))


def health_group() -> RuleGroup:
    """GPUs that broke, vanished or lost data."""
    up = c.GPU_UP.name
    down = AlertRule(
        alert="GpuDown",
        expr=f"{up} == 0",
        for_=t.GPU_DOWN_FOR,
        severity="critical",
        summary="A GPU stopped answering.",
        description=(
            f"{_WHERE} does not answer NVML (lost, needs a reset, or hung) for "
            f"{t.GPU_DOWN_FOR}. The other GPUs of the host still report."
        ),
    )
    missing = AlertRule(
        alert="GpuMissing",
        expr=(
            f"(max_over_time({up}[{t.GPU_MISSING_LOOKBACK}]) unless {up})\n"
            "and on (job, instance) (up == 1)\n"
        ),
        for_=t.GPU_MISSING_FOR,
        severity="critical",
        summary="A GPU disappeared from its host.",
        description=(
            f"{_WHERE} was reported during the last {t.GPU_MISSING_LOOKBACK} but no longer is, "
            "while the exporter answers: it fell off the bus or the driver no longer sees it. "
            f"Resolves by itself {t.GPU_MISSING_LOOKBACK} after a deliberate removal."
        ),
    )
    ecc = AlertRule(
        alert="GpuEccUncorrectedErrors",
        expr=f"increase({sel(c.ECC_ERRORS, UNCORRECTED)}[{t.ECC_WINDOW}]) > 0",
        for_="0s",
        severity="critical",
        summary="A GPU reported uncorrectable memory errors.",
        description=(
            f"{_WHERE} counted {{{{ $value | humanize }}}} uncorrected ECC errors in the last "
            f"{t.ECC_WINDOW}: data was lost. Drain the GPU and reset it."
        ),
    )
    return RuleGroup("gpu-health", (down, missing, ecc))


def exporter_group() -> RuleGroup:
    """The exporter and its data source."""
    exporter_down = AlertRule(
        alert="GpuExporterDown",
        expr=f'up{{job=~"{t.EXPORTER_JOB_REGEX}"}} == 0',
        for_=t.EXPORTER_DOWN_FOR,
        severity="warning",
        summary="Prometheus cannot scrape a gpu-exporter.",
        description=(
            "Target " + _HOST + " of job {{ $labels.job }} has been down for "
            f"{t.EXPORTER_DOWN_FOR}: no GPU data or GPU alerts for that host."
        ),
    )
    source_down = AlertRule(
        alert="GpuExporterSourceDown",
        expr=f"{c.SOURCE_UP.name} == 0",
        for_=t.SOURCE_DOWN_FOR,
        severity="critical",
        summary="The exporter cannot read the GPUs at all.",
        description=(
            "The {{ $labels.source }} source of " + _HOST + " is down (NVML missing "
            f"or failing) for {t.SOURCE_DOWN_FOR}; the exporter keeps retrying."
        ),
    )
    failing = AlertRule(
        alert="GpuExporterCollectionFailing",
        expr=f"{c.COLLECTION_SUCCESS.name} == 0",
        for_=t.COLLECTION_FAILING_FOR,
        severity="warning",
        summary="The exporter's collections keep failing.",
        description=(
            "Collections on " + _HOST + " have not read every GPU without error for "
            f"{t.COLLECTION_FAILING_FOR}; see gpu_exporter_errors_total by kind."
        ),
    )
    stale = AlertRule(
        alert="GpuExporterDataStale",
        expr=f"{c.DATA_AGE.name} > {num(t.DATA_STALE_SECONDS)}",
        for_=t.DATA_STALE_FOR,
        severity="warning",
        summary="The exporter serves old data.",
        description=(
            "The data " + _HOST + " serves is {{ $value | humanizeDuration }} old: "
            "collections hang or fail and the last good snapshot is repeated."
        ),
    )
    errors = AlertRule(
        alert="GpuExporterErrors",
        expr=(
            f"increase({c.ERRORS.name}[{t.ERRORS_WINDOW}]) > {num(t.ERRORS_THRESHOLD)}"
        ),
        for_="0s",
        severity="info",
        summary="The exporter meets many errors while collecting.",
        description=(
            _HOST + " counted {{ $value | humanize }} errors of kind "
            f"{{{{ $labels.kind }}}} in the last {t.ERRORS_WINDOW}."
        ),
    )
    pod_resources = AlertRule(
        alert="GpuExporterPodResourcesFailing",
        expr=f"{c.POD_RESOURCES_UP.name} == 0",
        for_=t.POD_RESOURCES_FAILING_FOR,
        severity="warning",
        summary="The exporter cannot read the kubelet's GPU allocations.",
        description=(
            "The kubelet's PodResources API has not answered " + _HOST + " for "
            f"{t.POD_RESOURCES_FAILING_FOR} (see gpu_exporter_pod_resources_status): "
            "gpu_allocation_info is missing and GpuAllocatedIdle cannot fire there."
        ),
    )
    return RuleGroup("gpu-exporter", (exporter_down, source_down, failing, stale, errors,
                                      pod_resources))


TORCH_NEW_OOMS = (f"instance_user:{allocator.USER_TORCH_OOMS.name.removesuffix('_total')}"
                  f":increase{t.TORCH_OOM_WINDOW}")
TORCH_NEW_RETRIES = (
    f"instance_user:{allocator.USER_TORCH_ALLOC_RETRIES.name.removesuffix('_total')}"
    f":increase{t.TORCH_RETRIES_WINDOW}"
)


def _new_per_user(metric: c.Metric, window: str) -> str:
    """How much a per-(GPU, user) counter grew in ``window``, summed per user and host.

    The exporter keeps these counters across process exits (``gpu_user_torch_*_total``), so
    no rule reads per-process series. Per GPU: now minus ``window`` ago (never negative: an
    exporter restart counts as no growth), or the whole count for a series that did not exist
    ``window`` ago (a user's first process may publish an OOM in its first file).
    """
    now = metric.name
    return (
        f"sum without ({GPU_LABELS}) (\n"
        f"  clamp_min({now} - {now} offset {window}, 0)\n"
        f"  or ({now} unless {now} offset {window})\n"
        ")\n"
    )


def torch_group() -> RuleGroup:
    """Inside the processes: PyTorch out-of-memory errors and allocation retries, per user and
    host (the series exist only for processes running the publisher, with
    ``--collector.torch``). Which process it was is on the node dashboard."""
    oom = AlertRule(
        alert="GpuProcessTorchOutOfMemory",
        expr=f"{TORCH_NEW_OOMS} > 0",
        for_="0s",
        severity="warning",
        summary="A user's process hit a CUDA out-of-memory error in PyTorch.",
        description=(
            "Processes of user {{ $labels.user }} on " + _HOST + " raised "
            "{{ $value | humanize }} PyTorch out-of-memory error(s) in the last "
            f"{t.TORCH_OOM_WINDOW} (counted whether or not the program caught them). The node "
            "dashboard's row Inside the processes shows which one, with its tensors, cache and "
            "context."
        ),
    )
    retries = AlertRule(
        alert="GpuProcessTorchAllocRetries",
        expr=f"{TORCH_NEW_RETRIES} > {num(t.TORCH_RETRIES_THRESHOLD)}",
        for_=t.TORCH_RETRIES_FOR,
        severity="warning",
        summary="PyTorch keeps flushing its cache to satisfy allocations (fragmentation).",
        description=(
            "Processes of user {{ $labels.user }} on " + _HOST + " retried "
            f"{{{{ $value | humanize }}}} failed cudaMalloc calls in {t.TORCH_RETRIES_WINDOW}, "
            f"for {t.TORCH_RETRIES_FOR}: each retry frees the allocator's cache and "
            "synchronises (slow steps), and the next failure is an out-of-memory error. "
            "Fragmentation (inactive split bytes) or a GPU shared too tightly."
        ),
    )
    return RuleGroup("gpu-torch", (
        RecordingRule(TORCH_NEW_OOMS,
                      _new_per_user(allocator.USER_TORCH_OOMS, t.TORCH_OOM_WINDOW)),
        RecordingRule(TORCH_NEW_RETRIES,
                      _new_per_user(allocator.USER_TORCH_ALLOC_RETRIES, t.TORCH_RETRIES_WINDOW)),
        oom, retries,
    ))


def groups() -> tuple[RuleGroup, ...]:
    """Every alert group, in file order."""
    return (memory_group(), idle_group(), thermal_group(), health_group(),
            health_alerts.xid_group(), health_alerts.memory_repair_group(), torch_group(),
            exporter_group())


def all_alerts() -> tuple[AlertRule, ...]:
    """Every alerting rule across the groups."""
    return tuple(r for g in groups() for r in g.rules if isinstance(r, AlertRule))


def all_records() -> tuple[RecordingRule, ...]:
    """The recording rules that live in the alert groups (alerts read them)."""
    return tuple(r for g in groups() for r in g.rules if isinstance(r, RecordingRule))
