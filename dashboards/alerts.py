"""The alerting rules, grouped so each group can be switched off on its own.

Every alert name starts with ``Gpu``; every expression reads raw exporter metrics or recording
rules defined earlier in its own group (Prometheus evaluates a group's rules in order), so each
alert group works whether or not the recording groups are loaded. No rule reads per-process
series (the exporter sums idle processes per GPU and user), so alerts stay few (per GPU, per
user and host) and cheap at fleet scale. Thresholds come from ``exporter.catalogue.thresholds``.
"""

from __future__ import annotations

from dashboards import health_alerts
from dashboards.promql import (
    GPU_LABELS,
    activity_average,
    allocated_idle,
    num,
    reason_in,
    sel,
)
from dashboards.rules import GPU_TEXT, HOST_TEXT, AlertRule, RecordingRule, RuleGroup
from exporter.catalogue import metrics, thresholds
from exporter.catalogue.metrics import allocator

UNCORRECTED = 'type="uncorrected"'
_HW_POWER_REASONS = tuple(r for r in metrics.POWER_THROTTLE_REASONS if r.startswith("hw_"))
_SW_POWER_REASONS = tuple(r for r in metrics.POWER_THROTTLE_REASONS if not r.startswith("hw_"))

used, total = metrics.MEMORY_USED.name, metrics.MEMORY_TOTAL.name


#: Per GPU, the leak trend the forecast alert and the users dashboard's forecast panels share:
#: seconds until the total at the trend of the last LEAK_WINDOW, and the memory expected in
#: LEAK_HORIZON_SECONDS as a share of the total.
TIME_TO_FULL = f"instance_gpu:gpu_memory_seconds_until_full:deriv{thresholds.LEAK_WINDOW}"
MEMORY_FORECAST = (
    f"instance_gpu:gpu_memory_used:predict_linear{thresholds.LEAK_WINDOW}_{thresholds.LEAK_HORIZON_SECONDS}s_ratio"
)


def memory_group() -> RuleGroup:
    """Memory nearly full, and the leak forecast (its trend recorded first, for the dashboards:
    a forecast panel then reads one sample per GPU and step instead of a window)."""
    almost_full = AlertRule(
        alert="GpuMemoryAlmostFull",
        expr=f"{used} / {total} > {num(thresholds.MEMORY_USED_RATIO)}",
        for_=thresholds.MEMORY_USED_FOR,
        severity="warning",
        summary="GPU memory is almost full.",
        description=(
            f"{GPU_TEXT} has {{{{ $value | humanizePercentage }}}} of its memory in use (over "
            f"{thresholds.MEMORY_USED_RATIO:.0%} for {thresholds.MEMORY_USED_FOR}). New "
            "allocations will fail with CUDA out-of-memory errors; see which processes and users "
            "hold it."
        ),
    )
    horizon = thresholds.LEAK_HORIZON_SECONDS
    time_to_full = RecordingRule(
        TIME_TO_FULL, f"({total} - {used}) / deriv({used}[{thresholds.LEAK_WINDOW}])"
    )
    forecast_ratio = RecordingRule(
        MEMORY_FORECAST, f"predict_linear({used}[{thresholds.LEAK_WINDOW}], {horizon}) / {total}"
    )
    forecast = AlertRule(
        alert="GpuMemoryExhaustionForecast",
        expr=(
            f"{TIME_TO_FULL}\nand {MEMORY_FORECAST} > 1\nand "
            f"predict_linear({used}[{thresholds.LEAK_RECENT_WINDOW}], {horizon}) > {total}\nand "
            f"delta({used}[{thresholds.LEAK_WINDOW}]) > {num(thresholds.LEAK_MIN_GROWTH_RATIO)} * "
            f"{total}\n"
        ),
        for_=thresholds.LEAK_FOR,
        severity="warning",
        summary="GPU memory keeps growing and will run out.",
        description=(
            f"Used memory of {GPU_TEXT} has grown steadily over the last {thresholds.LEAK_WINDOW} "
            "and, at that rate, reaches the total in about {{ $value | humanizeDuration }}. A "
            "process is probably leaking (tensors kept alive, a growing cache)."
        ),
    )
    return RuleGroup("gpu-memory", (time_to_full, forecast_ratio, almost_full, forecast))


IDLE_MEMORY_NOW = f"instance_user:{metrics.USER_IDLE_MEMORY.name}:sum"
IDLE_MEMORY = (
    f"instance_user:{metrics.USER_IDLE_MEMORY.name}:min_over_time{thresholds.IDLE_AVG_WINDOW}"
)
USER_UTILIZATION_MAX = f"instance_user:{metrics.USER_UTILIZATION_MAX.name}:max"
#: Per GPU, how busy it really was over the idle window: SM activity where the GPU reports it
#: (GPM, Hopper and newer), utilisation where it does not. One expression for a mixed fleet.
GPU_ACTIVITY_AVG = f"instance_gpu:gpu_activity_ratio:avg_over_time{thresholds.IDLE_AVG_WINDOW}"
#: How the alert descriptions name that signal.
ACTIVITY_TEXT = "activity (SM activity where the GPU reports it, else utilisation)"


#: Alerts on idle memory fire once per user across the fleet, never per host or process: a
#: lab whose notebooks idle on every node gets one alert per user, routed to that user by its
#: ``user`` label, and Prometheus keeps a handful of alerts, not thousands. The labels that
#: tell hosts apart (the target's address, the chart's node and exporter pod) are summed away;
#: every other target label (job, cluster, ...) is kept for routing.
PER_HOST_LABELS = ("instance", "node", "exporter_pod")
FLEET_USER = f"sum without ({', '.join(PER_HOST_LABELS)})"


def _hosts(record: str) -> str:
    """'N hosts' for a per-user alert: the hosts where ``record`` is above 0 for the alert's
    labels (user, job and any other kept target label, as matchers built from ``$labels``).

    A ``query`` in an annotation runs at every evaluation for every active alert: affordable
    because these alerts are one per user, and it reads one recorded series per host.
    """
    return (
        '{{ $m := "" }}{{ range $k, $v := $labels }}{{ $m = printf "%s%s=%q," $m $k $v }}'
        f'{{{{ end }}}}{{{{ with printf "count({record}{{%s}} > 0)" $m | query }}}}'
        "{{ with . | first | value }}{{ . }} host{{ if ne . 1.0 }}s{{ end }}{{ end }}{{ end }}"
    )


def user_idle_records() -> tuple[RecordingRule, ...]:
    """Per user and host, what the per-user idle alerts and the users dashboard read.

    No rule reads per-process series: the exporter sums each user's idle processes per GPU
    (``gpu_user_idle_memory_bytes``: processes over ``IDLE_PROCESS_MEMORY_BYTES`` under
    ``IDLE_UTILIZATION_RATIO`` at that collection) and reports their busiest process, so the
    group's cost grows with GPUs and users, not processes. The window's minimum of the idle sum
    is memory that stayed idle for the whole window; a user whose processes are busy has a 0
    there, so the minimum sees the busy moments too.
    """
    window = thresholds.IDLE_AVG_WINDOW
    gpus = ", ".join(metrics.GPU_LABELS)
    return (
        RecordingRule(IDLE_MEMORY_NOW, f"sum without ({gpus}) ({metrics.USER_IDLE_MEMORY.name})"),
        RecordingRule(IDLE_MEMORY, f"min_over_time({IDLE_MEMORY_NOW}[{window}])"),
        RecordingRule(
            USER_UTILIZATION_MAX, f"max without ({gpus}) ({metrics.USER_UTILIZATION_MAX.name})"
        ),
    )


def gpu_idle_record() -> RecordingRule:
    """Per GPU, the window's average activity the per-GPU idle alerts share."""
    return RecordingRule(GPU_ACTIVITY_AVG, activity_average("", thresholds.IDLE_AVG_WINDOW))


def idle_group() -> RuleGroup:
    """GPUs holding memory while nothing runs, starved GPUs, idle pod allocations.

    At most one alert per GPU (per allocation for pods), never one per process. Which
    processes: the node dashboard's *Idle processes* table and ``gpu-exporter report``.
    """
    gpu_idle = AlertRule(
        alert="GpuMemoryHeldIdle",
        expr=(
            f"{used}\n"
            f"and {used} / {total} > {num(thresholds.IDLE_GPU_MEMORY_RATIO)}\n"
            f"and {GPU_ACTIVITY_AVG} < {num(thresholds.IDLE_UTILIZATION_RATIO)}\n"
        ),
        for_=thresholds.IDLE_FOR,
        severity="warning",
        summary="A GPU holds memory but does no work.",
        description=(
            f"{GPU_TEXT} holds {{{{ $value | humanize1024 }}}}B of memory while its "
            f"{ACTIVITY_TEXT} stayed under {thresholds.IDLE_UTILIZATION_RATIO:.0%} for "
            f"{thresholds.IDLE_FOR}: a forgotten notebook, or a hung job (one spinning on a "
            "tiny kernel shows high utilisation but no SM activity), is blocking it for everyone "
            "else."
        ),
    )
    # The idle alert's per-GPU average, recorded above, when the windows agree (one window
    # read per GPU instead of three).
    starved_util = (GPU_ACTIVITY_AVG
                    if thresholds.STARVED_AVG_WINDOW == thresholds.IDLE_AVG_WINDOW
                    else activity_average("", thresholds.STARVED_AVG_WINDOW))
    starved = AlertRule(
        alert="GpuStarved",
        expr=(
            f"{starved_util} < {num(thresholds.STARVED_UTILIZATION_RATIO)}\n"
            f"and {starved_util} >= {num(thresholds.IDLE_UTILIZATION_RATIO)}\n"
            f"and avg_over_time({metrics.POWER_USAGE.name}[{thresholds.STARVED_AVG_WINDOW}]) "
            f"/ {metrics.POWER_LIMIT.name} < {num(thresholds.STARVED_POWER_RATIO)}\n"
            f"and {metrics.PROCESSES.name} > 0\n"
        ),
        for_=thresholds.STARVED_FOR,
        severity="info",
        summary="A GPU in use is starved: low activity and power for a long time.",
        description=(
            f"{GPU_TEXT} has processes but averaged only {{{{ $value | humanizePercentage }}}} "
            f"{ACTIVITY_TEXT} and under {thresholds.STARVED_POWER_RATIO:.0%} of its power limit "
            f"for {thresholds.STARVED_FOR}: the job waits on the CPU, data loading or I/O, or "
            "feeds the GPU batches too small to fill it."
        ),
    )
    allocated = AlertRule(
        alert="GpuAllocatedIdle",
        expr=allocated_idle("", ratio=thresholds.IDLE_UTILIZATION_RATIO,
                            window=thresholds.IDLE_AVG_WINDOW,
                            average=GPU_ACTIVITY_AVG) + "\n",
        for_=thresholds.IDLE_FOR,
        severity="warning",
        summary="A pod holds an allocated GPU and does nothing with it.",
        description=(
            "Pod {{ $labels.namespace }}/{{ $labels.pod }} (container {{ $labels.container }}) was "
            f"given {GPU_TEXT} by the kubelet, and for {thresholds.IDLE_FOR} either none of its "
            "processes was on that GPU or the GPU, its alone, stayed under "
            f"{thresholds.IDLE_UTILIZATION_RATIO:.0%} {ACTIVITY_TEXT}. Nobody else can be "
            "scheduled on it."
        ),
    )
    return RuleGroup("gpu-idle", (gpu_idle_record(), gpu_idle, starved, allocated))


def idle_users_group() -> RuleGroup:
    """Memory a user's processes hold while idle: one alert per user across the fleet (idle
    processes; all of a user's processes idle), never per host or process. Its own group, apart
    from the per-GPU idle alerts: it can be left out where processes have no user (containers
    without host PID access), and the two evaluate side by side.
    """
    process_idle = AlertRule(
        alert="GpuProcessIdle",
        expr=f"{FLEET_USER} ({IDLE_MEMORY} > 0)",
        for_=thresholds.IDLE_FOR,
        severity="warning",
        summary="A user's GPU processes hold memory without using the GPU.",
        description=(
            "Processes of user {{ $labels.user }} hold {{ $value | humanize1024 }}B of GPU "
            "memory without using it, on "
            + _hosts(IDLE_MEMORY) + ": each holds over "
            f"{num(thresholds.IDLE_PROCESS_MEMORY_BYTES / thresholds.GIB)} GiB and stayed under "
            f"{thresholds.IDLE_UTILIZATION_RATIO:.0%} utilisation for "
            f"{thresholds.IDLE_AVG_WINDOW}, for {thresholds.IDLE_FOR}. The users dashboard (user "
            "{{ $labels.user }}) lists the hosts, the node dashboard's Idle processes table (or "
            "gpu-exporter report) the processes; ask the user to stop them or free the memory."
        ),
    )
    user_idle = AlertRule(
        alert="GpuUserMemoryIdle",
        expr=(
            f"{FLEET_USER} (\n"
            f"  sum without ({', '.join(metrics.GPU_LABELS)}) ({metrics.USER_MEMORY.name}) "
            f"> {num(thresholds.IDLE_USER_MEMORY_BYTES)}\n"
            f"  and max_over_time({USER_UTILIZATION_MAX}[{thresholds.IDLE_AVG_WINDOW}]) "
            f"< {num(thresholds.IDLE_UTILIZATION_RATIO)}\n"
            ")\n"
        ),
        for_=thresholds.IDLE_FOR,
        severity="info",
        summary="A user holds GPU memory on hosts where none of their processes compute.",
        description=(
            "User {{ $labels.user }} holds {{ $value | humanize1024 }}B of GPU memory on hosts "
            f"where they hold over {num(thresholds.IDLE_USER_MEMORY_BYTES / thresholds.GIB)} GiB "
            f"and none of their GPU processes exceeded {thresholds.IDLE_UTILIZATION_RATIO:.0%} "
            f"utilisation for {thresholds.IDLE_FOR}. The users dashboard (user {{{{ $labels.user "
            "}}) lists the hosts."
        ),
    )
    return RuleGroup("gpu-idle-users", (*user_idle_records(), process_idle, user_idle))


def thermal_group() -> RuleGroup:
    """Temperature and clock slowdowns."""
    temp = metrics.TEMPERATURE.name
    high = AlertRule(
        alert="GpuTemperatureHigh",
        expr=f"{temp} > {num(thresholds.TEMPERATURE_WARNING_CELSIUS)}",
        for_=thresholds.TEMPERATURE_WARNING_FOR,
        severity="warning",
        summary="A GPU is running hot.",
        description=(
            f"{GPU_TEXT} is at {{{{ $value }}}} °C (over "
            f"{num(thresholds.TEMPERATURE_WARNING_CELSIUS)} °C for "
            f"{thresholds.TEMPERATURE_WARNING_FOR}). Check fans, airflow and the room's cooling."
        ),
    )
    critical = AlertRule(
        alert="GpuTemperatureCritical",
        expr=f"{temp} > {num(thresholds.TEMPERATURE_CRITICAL_CELSIUS)}",
        for_=thresholds.TEMPERATURE_CRITICAL_FOR,
        severity="critical",
        summary="A GPU is dangerously hot.",
        description=(
            f"{GPU_TEXT} is at {{{{ $value }}}} °C (over "
            f"{num(thresholds.TEMPERATURE_CRITICAL_CELSIUS)} °C for "
            f"{thresholds.TEMPERATURE_CRITICAL_FOR}); it is throttling hard and may shut down."
        ),
    )
    throttle = metrics.THROTTLE_ACTIVE
    thermal = AlertRule(
        alert="GpuThermalThrottling",
        expr=f"{sel(throttle, reason_in(metrics.THERMAL_THROTTLE_REASONS))} > 0",
        for_=thresholds.THROTTLE_FOR,
        severity="warning",
        summary="A GPU slows its clocks because it is too hot.",
        description=(
            f"{GPU_TEXT} reports clock event reason {{{{ $labels.reason }}}} for "
            f"{thresholds.THROTTLE_FOR}: it runs slower than it could until it cools down."
        ),
    )
    hardware = AlertRule(
        alert="GpuHardwareSlowdown",
        expr=f"{sel(throttle, reason_in(_HW_POWER_REASONS))} > 0",
        for_=thresholds.THROTTLE_FOR,
        severity="warning",
        summary="A GPU's hardware slowdown or power brake is active.",
        description=(
            f"{GPU_TEXT} reports {{{{ $labels.reason }}}} for {thresholds.THROTTLE_FOR}: the board "
            "halves its clocks because of an external power brake, a power-supply problem "
            "or overheating."
        ),
    )
    power_cap = AlertRule(
        alert="GpuPowerCapped",
        expr=f"{sel(throttle, reason_in(_SW_POWER_REASONS))} > 0",
        for_=thresholds.POWER_CAP_FOR,
        severity="info",
        summary="A GPU runs at its power limit.",
        description=(
            f"{GPU_TEXT} has been held at its power limit ({{{{ $labels.reason }}}}) for "
            f"{thresholds.POWER_CAP_FOR}. Normal for heavy jobs; if the limit was lowered, raise "
            "it."
        ),
    )
    return RuleGroup("gpu-thermal", (high, critical, thermal, hardware, power_cap))


def health_group() -> RuleGroup:
    """GPUs that broke, vanished or lost data."""
    up = metrics.GPU_UP.name
    down = AlertRule(
        alert="GpuDown",
        expr=f"{up} == 0",
        for_=thresholds.GPU_DOWN_FOR,
        severity="critical",
        summary="A GPU stopped answering.",
        description=(
            f"{GPU_TEXT} does not answer NVML (lost, needs a reset, or hung) for "
            f"{thresholds.GPU_DOWN_FOR}. The other GPUs of the host still report."
        ),
    )
    missing = AlertRule(
        alert="GpuMissing",
        expr=(
            f"(max_over_time({up}[{thresholds.GPU_MISSING_LOOKBACK}]) unless {up})\n"
            "and on (job, instance) (up == 1)\n"
        ),
        for_=thresholds.GPU_MISSING_FOR,
        severity="critical",
        summary="A GPU disappeared from its host.",
        description=(
            f"{GPU_TEXT} was reported during the last {thresholds.GPU_MISSING_LOOKBACK} but no "
            "longer is, while the exporter answers: it fell off the bus or the driver no longer "
            f"sees it. Resolves by itself {thresholds.GPU_MISSING_LOOKBACK} after a deliberate "
            "removal."
        ),
    )
    ecc = AlertRule(
        alert="GpuEccUncorrectedErrors",
        expr=f"increase({sel(metrics.ECC_ERRORS, UNCORRECTED)}[{thresholds.ECC_WINDOW}]) > 0",
        for_="0s",
        severity="critical",
        summary="A GPU reported uncorrectable memory errors.",
        description=(
            f"{GPU_TEXT} counted {{{{ $value | humanize }}}} uncorrected ECC errors in the last "
            f"{thresholds.ECC_WINDOW}: data was lost. Drain the GPU and reset it."
        ),
    )
    return RuleGroup("gpu-health", (down, missing, ecc))


def exporter_group() -> RuleGroup:
    """The exporter and its data source."""
    exporter_down = AlertRule(
        alert="GpuExporterDown",
        expr=f'up{{job=~"{thresholds.EXPORTER_JOB_REGEX}"}} == 0',
        for_=thresholds.EXPORTER_DOWN_FOR,
        severity="warning",
        summary="Prometheus cannot scrape a gpu-exporter.",
        description=(
            "Target " + HOST_TEXT + " of job {{ $labels.job }} has been down for "
            f"{thresholds.EXPORTER_DOWN_FOR}: no GPU data or GPU alerts for that host."
        ),
    )
    source_down = AlertRule(
        alert="GpuExporterSourceDown",
        expr=f"{metrics.SOURCE_UP.name} == 0",
        for_=thresholds.SOURCE_DOWN_FOR,
        severity="critical",
        summary="The exporter cannot read the GPUs at all.",
        description=(
            "The {{ $labels.source }} source of " + HOST_TEXT + " is down (NVML missing "
            f"or failing) for {thresholds.SOURCE_DOWN_FOR}; the exporter keeps retrying."
        ),
    )
    failing = AlertRule(
        alert="GpuExporterCollectionFailing",
        expr=f"{metrics.COLLECTION_SUCCESS.name} == 0",
        for_=thresholds.COLLECTION_FAILING_FOR,
        severity="warning",
        summary="The exporter's collections keep failing.",
        description=(
            "Collections on " + HOST_TEXT + " have not read every GPU without error for "
            f"{thresholds.COLLECTION_FAILING_FOR}; see gpu_exporter_errors_total by kind."
        ),
    )
    stale = AlertRule(
        alert="GpuExporterDataStale",
        expr=f"{metrics.DATA_AGE.name} > {num(thresholds.DATA_STALE_SECONDS)}",
        for_=thresholds.DATA_STALE_FOR,
        severity="warning",
        summary="The exporter serves old data.",
        description=(
            "The data " + HOST_TEXT + " serves is {{ $value | humanizeDuration }} old: "
            "collections hang or fail and the last good snapshot is repeated."
        ),
    )
    errors = AlertRule(
        alert="GpuExporterErrors",
        expr=(
            f"increase({metrics.ERRORS.name}[{thresholds.ERRORS_WINDOW}]) > "
            f"{num(thresholds.ERRORS_THRESHOLD)}"
        ),
        for_="0s",
        severity="info",
        summary="The exporter meets many errors while collecting.",
        description=(
            HOST_TEXT + " counted {{ $value | humanize }} errors of kind "
            f"{{{{ $labels.kind }}}} in the last {thresholds.ERRORS_WINDOW}."
        ),
    )
    pod_resources = AlertRule(
        alert="GpuExporterPodResourcesFailing",
        expr=f"{metrics.POD_RESOURCES_UP.name} == 0",
        for_=thresholds.POD_RESOURCES_FAILING_FOR,
        severity="warning",
        summary="The exporter cannot read the kubelet's GPU allocations.",
        description=(
            "The kubelet's PodResources API has not answered " + HOST_TEXT + " for "
            f"{thresholds.POD_RESOURCES_FAILING_FOR} (see gpu_exporter_pod_resources_status): "
            "gpu_allocation_info is missing and GpuAllocatedIdle cannot fire there."
        ),
    )
    return RuleGroup("gpu-exporter", (exporter_down, source_down, failing, stale, errors,
                                      pod_resources))


TORCH_NEW_OOMS = (f"instance_user:{allocator.USER_TORCH_OOMS.name.removesuffix('_total')}"
                  f":increase{thresholds.TORCH_OOM_WINDOW}")
TORCH_NEW_RETRIES = (
    f"instance_user:{allocator.USER_TORCH_ALLOC_RETRIES.name.removesuffix('_total')}"
    f":increase{thresholds.TORCH_RETRIES_WINDOW}"
)


def _new_per_user(metric: metrics.Metric, window: str) -> str:
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
            "Processes of user {{ $labels.user }} on " + HOST_TEXT + " raised "
            "{{ $value | humanize }} PyTorch out-of-memory error(s) in the last "
            f"{thresholds.TORCH_OOM_WINDOW} (counted whether or not the program caught them). The "
            "node dashboard's row Inside the processes shows which one, with its tensors, cache "
            "and context."
        ),
    )
    retries = AlertRule(
        alert="GpuProcessTorchAllocRetries",
        expr=f"{TORCH_NEW_RETRIES} > {num(thresholds.TORCH_RETRIES_THRESHOLD)}",
        for_=thresholds.TORCH_RETRIES_FOR,
        severity="warning",
        summary="PyTorch keeps flushing its cache to satisfy allocations (fragmentation).",
        description=(
            "Processes of user {{ $labels.user }} on " + HOST_TEXT + " retried "
            "{{ $value | humanize }} failed cudaMalloc calls in "
            f"{thresholds.TORCH_RETRIES_WINDOW}, for {thresholds.TORCH_RETRIES_FOR}: each retry "
            "frees the allocator's cache and synchronises (slow steps), and the next failure is an "
            "out-of-memory error. Fragmentation (inactive split bytes) or a GPU shared too tightly."
        ),
    )
    return RuleGroup("gpu-torch", (
        RecordingRule(TORCH_NEW_OOMS,
                      _new_per_user(allocator.USER_TORCH_OOMS, thresholds.TORCH_OOM_WINDOW)),
        RecordingRule(TORCH_NEW_RETRIES,
                      _new_per_user(allocator.USER_TORCH_ALLOC_RETRIES,
                                    thresholds.TORCH_RETRIES_WINDOW)),
        oom, retries,
    ))


def groups() -> tuple[RuleGroup, ...]:
    """Every alert group, in file order."""
    return (memory_group(), idle_group(), idle_users_group(), thermal_group(), health_group(),
            health_alerts.xid_group(), health_alerts.memory_repair_group(), torch_group(),
            exporter_group())


def all_alerts() -> tuple[AlertRule, ...]:
    """Every alerting rule across the groups."""
    return tuple(r for g in groups() for r in g.rules if isinstance(r, AlertRule))


def all_records() -> tuple[RecordingRule, ...]:
    """The recording rules that live in the alert groups (alerts read them)."""
    return tuple(r for g in groups() for r in g.rules if isinstance(r, RecordingRule))
