"""The alerting rules, grouped so each group can be switched off on its own.

Every alert name starts with ``Gpu``; every expression reads raw exporter metrics or recording
rules defined earlier in its own group (Prometheus evaluates a group's rules in order), so each
alert group works whether or not the recording groups are loaded. No rule reads per-process
series (the exporter sums idle processes per GPU and user), so alerts stay few (per GPU, per
user and host) and cheap at fleet scale. Thresholds come from ``exporter.catalogue.thresholds``.
"""

from __future__ import annotations

from dashboards import cost, escalation, health_alerts, owners
from dashboards.promql import (
    GPU_LABELS,
    activity_average,
    allocated_idle,
    gib,
    num,
    sel,
    throttled,
)
from dashboards.rules import (
    GPU_TEXT,
    HOST_TEXT,
    AlertRule,
    RecordingRule,
    RuleGroup,
    fires_under,
    not_live,
)
from exporter.catalogue import metrics, records, thresholds
from exporter.catalogue.metrics import allocator

UNCORRECTED = 'type="uncorrected"'
_HW_POWER_REASONS = tuple(r for r in metrics.POWER_THROTTLE_REASONS if r.startswith("hw_"))
_SW_POWER_REASONS = tuple(r for r in metrics.POWER_THROTTLE_REASONS if not r.startswith("hw_"))


def _throttle_time() -> tuple[float, str]:
    """Where the GPU counts throttle time: the share of the window a reason must hold the
    clocks, and the window (read when the rules build: a site may set THROTTLE_FOR)."""
    return thresholds.THROTTLE_TIME_SHARE, thresholds.THROTTLE_FOR


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
        audience="operator",
        summary="GPU memory is almost full.",
        description=(
            f"{GPU_TEXT} has {{{{ $value | humanizePercentage }}}} of its memory in use (over "
            f"{thresholds.MEMORY_USED_RATIO:.0%} for {thresholds.MEMORY_USED_FOR}). New "
            "allocations will fail with CUDA out-of-memory errors; see which processes and users "
            "hold it."
        ),
        when="used / total > 90 % for 5m",
        live=fires_under("memory-leak/0", only_that_gpu=True),
        runbook="""\
**Meaning:** a GPU has used more than 90 % of its memory for 5 minutes. **Impact:** the next
allocation on it (a new job, a larger batch) fails with `CUDA out of memory`.

1. Global: confirm on the fleet dashboard that the GPU stays above the line and whether it is
   flat (a job sized to fill the GPU; many frameworks reserve most memory on purpose, e.g. JAX
   preallocates 75 %, vLLM its `gpu_memory_utilization`) or climbing (see
   [GpuMemoryExhaustionForecast](#gpumemoryexhaustionforecast)).
2. Per process: on the node dashboard, sort the *Processes* table by memory. Several users on one
   GPU → agree who moves; one forgotten process → [GpuProcessIdle](#gpuprocessidle).
3. Code: if a process holds far more than its tensors need, check `memory_summary()`; call
   `torch.cuda.empty_cache()` after large temporary allocations, lower the batch size, or set
   `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` against fragmentation.

If the GPU is filled deliberately by a single dedicated job, silence the alert for that node.
""",
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
        expr=owners.per_holder(
            f"{TIME_TO_FULL}\nand {MEMORY_FORECAST} > 1\nand "
            f"predict_linear({used}[{thresholds.LEAK_RECENT_WINDOW}], {horizon}) > {total}\nand "
            f"delta({used}[{thresholds.LEAK_WINDOW}]) > {num(thresholds.LEAK_MIN_GROWTH_RATIO)} * "
            f"{total}",
            owners.growing_holders(thresholds.LEAK_WINDOW),
        ),
        for_=thresholds.LEAK_FOR,
        severity="warning",
        audience="owner",
        summary="GPU memory keeps growing and will run out.",
        description=(
            f"Used memory of {GPU_TEXT} has grown steadily over the last {thresholds.LEAK_WINDOW} "
            "and, at that rate, reaches the total in about {{ $value | humanizeDuration }}. A "
            "process is probably leaking (tensors kept alive, a growing cache)."
            "{{ with $labels.user }} The memory of user {{ . }} on it grew.{{ end }}"
        ),
        details=owners.details(owners.all_processes(), idle=False, end_commands=False),
        when=(
            "the 30m linear trend reaches the total within 1 h, the last 5m alone does too, and "
            "memory grew > 5 % of the total in 30m; for 10m (value: time until full)"
        ),
        live=fires_under("memory-leak/0", only_that_gpu=True),
        runbook="""\
**Meaning:** used memory has grown steadily over the last 30 minutes (by more than 5 % of the
total, and still growing over the last 5 minutes), and at that rate reaches the total within an
hour. The alert's value is the estimated time until full. **Impact:** a leak: the job will die
with an out-of-memory error, possibly taking co-located jobs with it.

1. Global: users dashboard → *Memory forecast in 1 h* and *Time until memory is full*.
2. Per process: node dashboard → *Process memory*: the process whose line only climbs.
3. Code: record memory history (`torch.cuda.memory._record_memory_history()`), dump a snapshot
   after a while and look for the growing stack; see the leak causes in the
   [diagnosis path](#3-inside-the-code-why-it-holds-that-much). Restarting the process buys time.

A model load (one step up) does not trigger it; noise on a flat line does not either.
""",
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
        expr=owners.per_holder(
            f"{used}\n"
            f"and {used} / {total} > {num(thresholds.IDLE_GPU_MEMORY_RATIO)}\n"
            f"and {GPU_ACTIVITY_AVG} < {num(thresholds.IDLE_UTILIZATION_RATIO)}",
            owners.holders(),
        ),
        for_=thresholds.IDLE_FOR,
        severity="warning",
        audience="owner",
        summary="A GPU holds memory but does no work.",
        description=(
            f"{GPU_TEXT} holds {{{{ $value | humanize1024 }}}}B of memory while its "
            f"{ACTIVITY_TEXT} stayed under {thresholds.IDLE_UTILIZATION_RATIO:.0%} for "
            f"{thresholds.IDLE_FOR}: a forgotten notebook, or a hung job (one spinning on a "
            "tiny kernel shows high utilisation but no SM activity), is blocking it for everyone "
            "else.{{ with $labels.user }} User {{ . }} holds memory on it.{{ end }}"
        ),
        details=(*owners.details(owners.all_processes(), idle=True, end_commands=True),
                 ("cost", cost.idle_cost_note("GpuMemoryHeldIdle", records.USER))),
        when=(
            "> 10 % of a GPU's memory used, activity (15m average; SM activity where the GPU "
            "reports it, else utilisation: `docs/gpu-activity.md`) < 5 %, for 1h"
        ),
        # input-starved's GPU 2 spins one kernel: utilisation 100 %, SM activity < 1 % (GPM).
        live=fires_under("shared-workstation/2", "kubernetes-node/2", "input-starved/2"),
        runbook="""\
**Meaning:** more than 10 % of a GPU's memory is in use, but its activity averaged under 5 % for
an hour: its SM activity on GPUs with GPM (Hopper and newer), its utilisation on others.
**Impact:** the GPU is blocked for everybody else while doing nothing.

1. Global: fleet dashboard → "GPUs holding memory while idle".
2. Per user: users dashboard → *Idle memory by node and user*; per process: node dashboard →
   *Idle processes* and *Processes* (age, user).
3. Typical causes: a Jupyter kernel left open, a debugger stopped at a breakpoint, a job hung on
   a collective (NCCL) or waiting for a dead peer, an inference server with no traffic. Ask the
   owner; a hung job can be killed (`kill <pid>`; it frees all its GPU memory).
4. Utilisation high but the alert fires: on a GPU with GPM, a process spinning in a kernel (one
   thread block polling a flag, a hung synchronisation) keeps utilisation at 100 % with under
   1 % of the SMs busy. Node dashboard → *Busy but barely working* names the GPU; its
   processes' per-process utilisation still looks busy (NVML samples per process are "a kernel
   ran", GPM has no per-process figures), so the per-user idle alerts stay silent for it.

The alert names each user holding more than 1 GiB on the GPU (one alert per GPU and holder, so
each is told about their share; the value is the GPU's used memory); without a known holder
(processes not collected, or no single user over 1 GiB) it stays one alert for the GPU, which
the shipped routing sends to the operator. When [GpuProcessIdle](#gpuprocessidle) fires for the
same user, Alertmanager mutes this one (that alert lists the user's processes).
""",
    )
    # The idle alert's per-GPU average, recorded above, when the windows agree (one window
    # read per GPU instead of three).
    starved_util = (GPU_ACTIVITY_AVG
                    if thresholds.STARVED_AVG_WINDOW == thresholds.IDLE_AVG_WINDOW
                    else activity_average("", thresholds.STARVED_AVG_WINDOW))
    starved = AlertRule(
        alert="GpuStarved",
        expr=owners.per_holder(
            f"{starved_util} < {num(thresholds.STARVED_UTILIZATION_RATIO)}\n"
            f"and {starved_util} >= {num(thresholds.IDLE_UTILIZATION_RATIO)}\n"
            f"and avg_over_time({metrics.POWER_USAGE.name}[{thresholds.STARVED_AVG_WINDOW}]) "
            f"/ {metrics.POWER_LIMIT.name} < {num(thresholds.STARVED_POWER_RATIO)}\n"
            f"and {metrics.PROCESSES.name} > 0",
            owners.holders(),
        ),
        for_=thresholds.STARVED_FOR,
        severity="info",
        audience="owner",
        summary="A GPU in use is starved: low activity and power for a long time.",
        description=(
            f"{GPU_TEXT} has processes but averaged only {{{{ $value | humanizePercentage }}}} "
            f"{ACTIVITY_TEXT} and under {thresholds.STARVED_POWER_RATIO:.0%} of its power limit "
            f"for {thresholds.STARVED_FOR}: the job waits on the CPU, data loading or I/O, or "
            "feeds the GPU batches too small to fill it.{{ with $labels.user }} User {{ . }} "
            "holds memory on it.{{ end }}"
        ),
        details=owners.details(owners.all_processes(), idle=False, end_commands=False),
        when=(
            "processes present, 5 % ≤ activity < 40 % and power < 40 % of the limit (15m averages) "
            "for 30m"
        ),
        live=fires_under("input-starved/0", "shared-workstation/1"),
        runbook="""\
**Meaning:** processes hold the GPU and it is not idle, but its activity (SM activity with GPM,
else utilisation) averaged under 40 % and power under 40 % of the limit for 30 minutes (info).
**Impact:** the job runs several times slower than the hardware allows: it waits for the CPU,
the data loader, storage or the network, or feeds the GPU batches too small to fill it.

1. Global: node dashboard → *Utilisation*, *Power vs limit* (power that never rises) and, on
   GPUs with GPM, *Utilisation vs SM activity*: utilisation may look healthy while the kernels
   fill a few SMs (small batches, a launch-bound loop).
2. Per process: check the job's CPU usage (`top -p <pid>`, `py-spy top --pid <pid>`); a single
   core at 100 % is the bottleneck.
3. Code: profile one training step with the PyTorch profiler (`ProfilerActivity.CPU` and `CUDA`)
   and look for gaps between kernels; raise `DataLoader(num_workers=…, pin_memory=True,
   prefetch_factor=…)`, move decoding/augmentation to the GPU, cache the dataset on local disk,
   increase the batch size.
""",
    )
    allocated = AlertRule(
        alert="GpuAllocatedIdle",
        expr=allocated_idle("", ratio=thresholds.IDLE_UTILIZATION_RATIO,
                            window=thresholds.IDLE_AVG_WINDOW,
                            average=GPU_ACTIVITY_AVG) + "\n",
        for_=thresholds.IDLE_FOR,
        severity="warning",
        audience="owner",
        summary="A pod or Slurm job holds an allocated GPU and does nothing with it.",
        description=(
            "{{ if $labels.slurm_job }}Slurm job {{ $labels.slurm_job }} (user "
            "{{ $labels.user }}) was given " + GPU_TEXT + " by Slurm{{ else }}Pod "
            "{{ $labels.namespace }}/{{ $labels.pod }} (container {{ $labels.container }}) was "
            f"given {GPU_TEXT} by the kubelet{{{{ end }}}}, and for {thresholds.IDLE_FOR} either "
            "none of its processes was on that GPU or the GPU, its alone, stayed under "
            f"{thresholds.IDLE_UTILIZATION_RATIO:.0%} {ACTIVITY_TEXT}. Nobody else can be "
            "scheduled on it."
        ),
        details=(
            ("processes", owners.process_list(owners.all_processes(), idle=True)),
            ("commands", owners.pod_command()),
            ("escalation", owners.escalation_note()),
            ("cost", cost.idle_cost_note("GpuAllocatedIdle", records.POD)),
        ),
        when=(
            "a GPU the kubelet allocated to a pod (or Slurm to a job) had no process of that pod "
            "(job), or (allocated to one container or job alone) averaged under 5 % activity over "
            "15m, for 1h"
        ),
        # notebook-alice-0's GPU idles; sweep-trial-3 holds a replica of GPU 3 with no process;
        # Slurm job 913402 idles on GPU 4, job 913520 holds GPU 7 and runs nothing.
        live=fires_under("kubernetes-node/2", "kubernetes-node/3", "dra-node/3", "slurm-node/4",
                         "slurm-node/7"),
        runbook="""\
**Meaning:** the kubelet allocated a GPU to a pod, or Slurm to a job (`gpu_allocation_info`,
with `slurm_job` and `user` for a job: its prolog's allocation file), and for an hour either no
process of that pod (job) held memory on the GPU, or the GPU was its alone
(`sharing="exclusive"`) and its activity (SM activity with GPM, else utilisation) averaged
under 5 %. **Impact:** the most expensive
waste on a cluster: the scheduler will not give that GPU to anybody else while the pod or job
runs, whatever it does with it.

1. Global: **GPU workloads** dashboard (`uid gpu-exporter-workloads`) → *Allocated but idle*
   lists namespace, pod, container, node and GPU (*Slurm jobs holding GPUs idle*: job, user,
   node and GPU), and which of the two conditions holds.
2. No process on the GPU: the pod requested `nvidia.com/gpu` but never touched CUDA (a CPU-only
   image, a crashed worker inside a still-running pod, an init step waiting on something), or it
   runs its GPU work in a container whose cgroup the exporter cannot match (check
   `gpu_process_memory_used_bytes{pod=""}` on that GPU). `kubectl -n <ns> logs <pod> -c <container>`
   and `kubectl -n <ns> describe pod <pod>` usually say which. A Slurm job: an interactive
   `salloc` left open, a batch script still in its CPU phase, or a job that asked for more GPUs
   than its code uses (`gpu-exporter report job <id>` shows it per GPU;
   `scontrol show job <id>` its command and start). The exporter needs `--slurm` to see the
   job's processes: without it every job allocation looks empty.
3. A process but zero utilisation: see [GpuMemoryHeldIdle](#gpumemoryheldidle) (forgotten
   notebooks, hung collectives, idle inference servers). For notebooks, an idle-culler
   (JupyterHub's `cull_idle`, Kubeflow's notebook culling) releases the allocation.
4. Ask the owner to scale the workload down or delete the pod (cancel the job: `scancel <id>`);
   the allocation ends with the pod or job.

Shared (time-sliced or MPS) GPUs are only checked for "no process of the pod": their device
utilisation belongs to every pod sharing them. See `docs/attribution.md` §4.
""",
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
        audience="owner",
        summary="A user's GPU processes hold memory without using the GPU.",
        description=(
            "Processes of user {{ $labels.user }} hold {{ $value | humanize1024 }}B of GPU "
            "memory without using it, on "
            + _hosts(IDLE_MEMORY) + ": each holds over "
            f"{num(thresholds.IDLE_PROCESS_MEMORY_BYTES / thresholds.GIB)} GiB and stayed under "
            f"{thresholds.IDLE_UTILIZATION_RATIO:.0%} utilisation for "
            f"{thresholds.IDLE_AVG_WINDOW}, for {thresholds.IDLE_FOR}. The users dashboard (user "
            "{{ $labels.user }}) lists the hosts, the node dashboard's Idle processes table (or "
            "gpu-exporter report) the processes. If they are no longer needed, stop them or free "
            "the memory."
        ),
        details=(*owners.details(owners.idle_processes(), idle=True, end_commands=True),
                 ("cost", cost.idle_cost_note("GpuProcessIdle", records.USER))),
        when=(
            "one alert per user across the fleet: their processes holding > 1 GiB each stayed "
            "under 5 % utilisation for 15m, on one or more hosts, for 1h (value: the memory they "
            "hold; the description counts the hosts)"
        ),
        live=fires_under("shared-workstation", "kubernetes-node", "slurm-node"),
        runbook="""\
**Meaning:** a user's processes, each holding more than 1 GiB on a GPU, stayed under 5 %
utilisation at every evaluation for 15 minutes, on one host or several, and the user has had
such memory somewhere for an hour. The value is the memory they hold together across the fleet;
the description says on how many hosts. **Impact:** as above, but you know who.

There is one alert per user across the whole fleet (per scrape job and cluster), never one per
host or per process: a lab whose notebooks idle on a hundred nodes raises one alert per user, not
thousands, and every active alert costs Prometheus a template expansion per evaluation
(`docs/scale.md`). The `user` label routes it to that user (see [Routing at fleet
scale](#routing-at-fleet-scale)). Which hosts: users dashboard → pick the user → *Idle memory by
node and user*. Which processes: node dashboard → *Idle processes* (pid, name, memory, age), or
`gpu-exporter report` for the history. Contact the user named in the alert (on Kubernetes: the
pod's owner). If the process is a notebook, restarting its kernel frees the memory;
`torch.cuda.empty_cache()` frees only the cache, not the CUDA context or live tensors. Without
host PID access the user shows as `unknown`: see the [diagnosis
path](#2-per-process-who-holds-it).

Each host's processes must have idled for 15 minutes to count, but the hour is the user's, not
a host's: a user who always leaves some notebook idle somewhere for an hour is alerted even if
no single host idled that long. That is the intended nudge.
""",
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
        audience="owner",
        summary="A user holds GPU memory on hosts where none of their processes compute.",
        description=(
            "User {{ $labels.user }} holds {{ $value | humanize1024 }}B of GPU memory on hosts "
            f"where they hold over {gib(thresholds.IDLE_USER_MEMORY_BYTES)} GiB "
            f"and none of their GPU processes exceeded {thresholds.IDLE_UTILIZATION_RATIO:.0%} "
            f"utilisation for {thresholds.IDLE_FOR}. The users dashboard (user {{{{ $labels.user "
            "}}) lists the hosts."
        ),
        details=(*owners.details(owners.all_processes(), idle=True, end_commands=True),
                 ("cost", cost.idle_cost_note("GpuUserMemoryIdle", records.USER))),
        when=(
            "one alert per user across the fleet: on some host the user holds > 4 GiB and none of "
            "their processes there exceeded 5 % in 15m, for 1h"
        ),
        live=fires_under("shared-workstation", "kubernetes-node"),
        runbook="""\
**Meaning:** on one or more hosts, a user holds more than 4 GiB of GPU memory and none of their
GPU processes there exceeded 5 % utilisation at any evaluation of the last 15 minutes, for an
hour (info); one alert per user across the fleet, the value being the memory on those hosts.
Useful for fair-share reminders on shared workstations. Users dashboard → filter by the user;
*Idle memory by node and user*, then the node dashboard's *Idle processes*. When
[GpuProcessIdle](#gpuprocessidle) fires for the same user, the shipped Alertmanager
configuration mutes this one (see [Routing at fleet scale](#routing-at-fleet-scale)).
""",
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
        audience="operator",
        summary="A GPU is running hot.",
        description=(
            f"{GPU_TEXT} is at {{{{ $value }}}} °C (over "
            f"{num(thresholds.TEMPERATURE_WARNING_CELSIUS)} °C for "
            f"{thresholds.TEMPERATURE_WARNING_FOR}). Check fans, airflow and the room's cooling."
        ),
        when="> 80 °C for 5m",
        live=fires_under("overheating/2", only_that_gpu=True),
        runbook="""\
**Meaning:** GPU core temperature above 80 °C for 5 minutes. **Impact:** close to the point where
the GPU slows its clocks; sustained heat shortens its life.

Check the node dashboard's *Temperature* and *Clocks* panels, then the hardware: fan speed
(`gpu_fan_speed_ratio`, or `nvidia-smi -q -d TEMPERATURE,PERFORMANCE`), blocked airflow, a
failed chassis fan, the room's cooling, neighbours in the same chassis running hot as well.
""",
    )
    critical = AlertRule(
        alert="GpuTemperatureCritical",
        expr=f"{temp} > {num(thresholds.TEMPERATURE_CRITICAL_CELSIUS)}",
        for_=thresholds.TEMPERATURE_CRITICAL_FOR,
        severity="critical",
        audience="operator",
        summary="A GPU is dangerously hot.",
        description=(
            f"{GPU_TEXT} is at {{{{ $value }}}} °C (over "
            f"{num(thresholds.TEMPERATURE_CRITICAL_CELSIUS)} °C for "
            f"{thresholds.TEMPERATURE_CRITICAL_FOR}); it is throttling hard and may shut down."
        ),
        when="> 90 °C for 2m",
        live=fires_under("overheating/2", only_that_gpu=True),
        runbook="""\
**Meaning:** above 90 °C for 2 minutes. **Impact:** the GPU throttles hard and can shut down or
crash the job (Xid errors in `dmesg`). Move the work off the GPU now, then fix cooling as for
[GpuTemperatureHigh](#gputemperaturehigh).
""",
    )
    thermal = AlertRule(
        alert="GpuThermalThrottling",
        expr=throttled(metrics.THERMAL_THROTTLE_REASONS, *_throttle_time()),
        for_=thresholds.THROTTLE_FOR,
        severity="warning",
        audience="operator",
        summary="A GPU slows its clocks because it is too hot.",
        description=(
            f"{GPU_TEXT} reports clock event reason {{{{ $labels.reason }}}} for "
            f"{thresholds.THROTTLE_FOR}: it runs slower than it could until it cools down."
        ),
        when="`sw_thermal_slowdown` / `hw_thermal_slowdown` active for 5m (with throttle time: "
             "over half of each 5m)",
        live=fires_under("overheating/2", only_that_gpu=True),
        runbook="""\
**Meaning:** the driver reports `sw_thermal_slowdown` or `hw_thermal_slowdown` for 5 minutes:
the GPU lowers its clocks because it is too hot (where the GPU counts throttle time,
`--collector.throttle_time`: for more than half of each 5 minutes, so short events between
scrapes count too). Node dashboard → *Throttle time*, *Throttle reasons active*, *Clocks*,
*Temperature*. Fix the cooling; `nvidia-smi -q -d PERFORMANCE` lists the active reasons.
""",
    )
    hardware = AlertRule(
        alert="GpuHardwareSlowdown",
        expr=throttled(_HW_POWER_REASONS, *_throttle_time()),
        for_=thresholds.THROTTLE_FOR,
        severity="warning",
        audience="operator",
        summary="A GPU's hardware slowdown or power brake is active.",
        description=(
            f"{GPU_TEXT} reports {{{{ $labels.reason }}}} for {thresholds.THROTTLE_FOR}: the board "
            "halves its clocks because of an external power brake, a power-supply problem "
            "or overheating."
        ),
        when="`hw_slowdown` / `hw_power_brake_slowdown` active for 5m (with throttle time: "
             "over half of each 5m)",
        live=fires_under("overheating/2", only_that_gpu=True),
        runbook="""\
**Meaning:** `hw_slowdown` or `hw_power_brake_slowdown` active for 5 minutes: the board halves its
clocks because of overheating or an external power-brake signal (power supply, system
firmware). Check `dmesg` for Xid errors, power supplies and the BMC event log; if it persists on
a cool GPU, open a hardware ticket.
""",
    )
    power_cap = AlertRule(
        alert="GpuPowerCapped",
        expr=throttled(_SW_POWER_REASONS, *_throttle_time()),
        for_=thresholds.POWER_CAP_FOR,
        severity="info",
        audience="operator",
        summary="A GPU runs at its power limit.",
        description=(
            f"{GPU_TEXT} has been held at its power limit ({{{{ $labels.reason }}}}) for "
            f"{thresholds.POWER_CAP_FOR}. Normal for heavy jobs; if the limit was lowered, raise "
            "it."
        ),
        when="`sw_power_cap` active for 30m (with throttle time: over half of each 5m)",
        # bob's training job keeps the RTX 4090 at its power limit (an info alert after 30m).
        live=fires_under("shared-workstation/0", only_that_gpu=True),
        runbook="""\
**Meaning:** `sw_power_cap` active for 30 minutes (info): the GPU runs at its power limit. Normal
for heavy jobs. If the limit was lowered (`gpu_power_limit_watts` below the model's default,
`nvidia-smi -q -d POWER`), raise it with `nvidia-smi -pl <watts>` if your power budget allows.
""",
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
        audience="operator",
        summary="A GPU stopped answering.",
        description=(
            f"{GPU_TEXT} does not answer NVML (lost, needs a reset, or hung) for "
            f"{thresholds.GPU_DOWN_FOR}. The other GPUs of the host still report."
        ),
        when="`gpu_up == 0` for 2m",
        live=fires_under("gpu-failure/3", only_that_gpu=True),
        runbook="""\
**Meaning:** the exporter reaches the host but this GPU does not answer NVML (`gpu_up 0`) for 2
minutes: lost ("GPU is lost"), needs a reset, or a call hung. The other GPUs keep reporting.
A hung call shows in the exporter's `/readyz` (`hung_gpus`: index and seconds) and as
`gpu_exporter_errors_total{kind="gpu_timeout"}` (once per hang); the exporter does not ask that
GPU again until the call returns, and then reports it without a restart.

Check `nvidia-smi` on the node and `dmesg | grep -i xid` (Xid 79: fallen off the bus; 48/63/64:
memory errors). Drain the node's jobs from that GPU; `nvidia-smi -r -i <index>` (no processes
on it) or a reboot usually brings it back. Repeated losses: hardware ticket.
""",
    )
    missing = AlertRule(
        alert="GpuMissing",
        expr=(
            f"(max_over_time({up}[{thresholds.GPU_MISSING_LOOKBACK}]) unless {up})\n"
            "and on (job, instance) (up == 1)\n"
        ),
        for_=thresholds.GPU_MISSING_FOR,
        severity="critical",
        audience="operator",
        summary="A GPU disappeared from its host.",
        description=(
            f"{GPU_TEXT} was reported during the last {thresholds.GPU_MISSING_LOOKBACK} but no "
            "longer is, while the exporter answers: it fell off the bus or the driver no longer "
            f"sees it. Resolves by itself {thresholds.GPU_MISSING_LOOKBACK} after a deliberate "
            "removal."
        ),
        when="a GPU seen in the last 1h is no longer exported while its exporter is up, for 5m",
        live=not_live("the simulator cannot remove a GPU it reported before"),
        runbook="""\
**Meaning:** a GPU the exporter reported during the last hour is no longer reported at all, while
the exporter itself answers: the driver no longer enumerates it (fell off the bus), or the
exporter lost its NVML source. Check `nvidia-smi -L` and `lspci | grep -i nvidia` on the node, and
[GpuExporterSourceDown](#gpuexportersourcedown). After a deliberate removal the alert resolves by
itself an hour later.
""",
    )
    ecc = AlertRule(
        alert="GpuEccUncorrectedErrors",
        expr=f"increase({sel(metrics.ECC_ERRORS, UNCORRECTED)}[{thresholds.ECC_WINDOW}]) > 0",
        for_="0s",
        severity="critical",
        audience="operator",
        summary="A GPU reported uncorrectable memory errors.",
        description=(
            f"{GPU_TEXT} counted {{{{ $value | humanize }}}} uncorrected ECC errors in the last "
            f"{thresholds.ECC_WINDOW}: data was lost. Drain the GPU and reset it."
        ),
        when="uncorrected ECC errors increased in the last 15m",
        live=fires_under("gpu-failure/1", only_that_gpu=True),
        runbook="""\
**Meaning:** the GPU's volatile uncorrected ECC counter grew in the last 15 minutes. **Impact:**
data in GPU memory was corrupted: results of jobs running there may be wrong.

Drain the GPU (cordon the node on Kubernetes), check `nvidia-smi -q -d ECC,PAGE_RETIREMENT` (or
row remapping on A100/H100: `nvidia-smi -q -d ROW_REMAPPER`) and reset the GPU so pending
retirements/remaps take effect. Recurring errors: replace the GPU. A driver reload resets the
counter; that is not reported as new errors.
""",
    )
    return RuleGroup("gpu-health", (down, missing, ecc))


def exporter_group() -> RuleGroup:
    """The exporter and its data source."""
    exporter_down = AlertRule(
        alert="GpuExporterDown",
        expr=f'up{{job=~"{thresholds.EXPORTER_JOB_REGEX}"}} == 0',
        for_=thresholds.EXPORTER_DOWN_FOR,
        severity="warning",
        audience="operator",
        summary="Prometheus cannot scrape a gpu-exporter.",
        description=(
            "Target " + HOST_TEXT + " of job {{ $labels.job }} has been down for "
            f"{thresholds.EXPORTER_DOWN_FOR}: no GPU data or GPU alerts for that host."
        ),
        when="`up == 0` for a job matching `.*gpu-exporter.*`, for 5m",
        live=fires_under("down"),
        runbook="""\
**Meaning:** Prometheus could not scrape a gpu-exporter target (`up == 0`) for 5 minutes; no GPU
data and no GPU alerts for that host. Only jobs whose name matches `.*gpu-exporter.*` are watched
(`EXPORTER_JOB_REGEX`). Check the pod/container (`kubectl logs`, `docker logs`), that port 9477 is
reachable from Prometheus, and the exporter's `/healthz`.
""",
    )
    source_down = AlertRule(
        alert="GpuExporterSourceDown",
        expr=f"{metrics.SOURCE_UP.name} == 0",
        for_=thresholds.SOURCE_DOWN_FOR,
        severity="critical",
        audience="operator",
        summary="The exporter cannot read the GPUs at all.",
        description=(
            "The {{ $labels.source }} source of " + HOST_TEXT + " is down (NVML missing "
            f"or failing) for {thresholds.SOURCE_DOWN_FOR}; the exporter keeps retrying."
        ),
        when="`gpu_exporter_source_up == 0` (NVML down) for 5m",
        live=not_live("the simulated source never fails to start"),
        runbook="""\
**Meaning:** the exporter runs but its data source is down (`gpu_exporter_source_up 0`): NVML is
missing or failing to initialise (driver not loaded, `libnvidia-ml.so` not mounted in the
container, driver/library mismatch after an upgrade). The exporter retries with backoff; its
`/readyz` and log say why. In containers check the NVIDIA runtime (`NVIDIA_VISIBLE_DEVICES=all`,
`--gpus all` / `runtimeClassName: nvidia`).
""",
    )
    failing = AlertRule(
        alert="GpuExporterCollectionFailing",
        expr=f"{metrics.COLLECTION_SUCCESS.name} == 0",
        for_=thresholds.COLLECTION_FAILING_FOR,
        severity="warning",
        audience="operator",
        summary="The exporter's collections keep failing.",
        description=(
            "Collections on " + HOST_TEXT + " have not read every GPU without error for "
            f"{thresholds.COLLECTION_FAILING_FOR}; see gpu_exporter_errors_total by kind."
        ),
        when="`gpu_exporter_collection_success == 0` for 10m",
        live=fires_under("gpu-failure"),
        runbook="""\
**Meaning:** for 10 minutes the exporter's collections did not read every GPU without error
(`gpu_exporter_collection_success 0`). Often accompanies [GpuDown](#gpudown); otherwise look at
the health dashboard's *Errors by kind* and the exporter log.
""",
    )
    stale = AlertRule(
        alert="GpuExporterDataStale",
        expr=f"{metrics.DATA_AGE.name} > {num(thresholds.DATA_STALE_SECONDS)}",
        for_=thresholds.DATA_STALE_FOR,
        severity="warning",
        audience="operator",
        summary="The exporter serves old data.",
        description=(
            "The data " + HOST_TEXT + " serves is {{ $value | humanizeDuration }} old: "
            "collections hang or fail and the last good snapshot is repeated."
        ),
        when="`gpu_exporter_data_age_seconds > 60` for 5m",
        live=not_live("simulated collections never hang"),
        runbook="""\
**Meaning:** the data the exporter serves is more than 60 s old for 5 minutes: collections hang
(an NVML call stuck in the driver) and the last good snapshot is repeated. Health dashboard →
*Data age*, *Collection duration*. A hung driver often needs the GPU reset or the node rebooted;
restarting the exporter alone does not help if NVML itself hangs.
""",
    )
    errors = AlertRule(
        alert="GpuExporterErrors",
        expr=(
            f"increase({metrics.ERRORS.name}[{thresholds.ERRORS_WINDOW}]) > "
            f"{num(thresholds.ERRORS_THRESHOLD)}"
        ),
        for_="0s",
        severity="info",
        audience="operator",
        summary="The exporter meets many errors while collecting.",
        description=(
            HOST_TEXT + " counted {{ $value | humanize }} errors of kind "
            f"{{{{ $labels.kind }}}} in the last {thresholds.ERRORS_WINDOW}."
        ),
        when="more than 10 errors of one kind in 15m",
        live=fires_under("gpu-failure"),
        runbook="""\
**Meaning:** more than 10 collection errors of one kind in 15 minutes (info). Kinds:
`gpu_lost`, `nvml_call`, `garbled_process_entry`, `collection_timeout`, `gpu_timeout` (one GPU's
call hung; see [GpuDown](#gpudown)), `process_utilization_sample` (an unreadable per-process
utilisation sample, skipped), `source_init`, `owner_lookup` (a process exited between the GPU's
process list and the `/proc` lookup: harmless in small numbers), `pod_resources` (failed
PodResources polls), `container_name` (a Docker or Podman file that exists but cannot be read),
`passwd_file` (the `--passwd-file` cannot be read: users show as numeric uids until it can),
`web_config` (a changed `--web.config.file` failed to load: the previous one stays in force),
`torch_stats_file` (a rejected PyTorch statistics file), `slurm_allocation` (a refused Slurm
allocation file, or a `--slurm.allocation-dir` that cannot be read; docs/slurm.md).
Health dashboard → *Errors by kind*; the exporter log has the details.
""",
    )
    pod_resources = AlertRule(
        alert="GpuExporterPodResourcesFailing",
        expr=f"{metrics.POD_RESOURCES_UP.name} == 0",
        for_=thresholds.POD_RESOURCES_FAILING_FOR,
        severity="warning",
        audience="operator",
        summary="The exporter cannot read the kubelet's GPU allocations.",
        description=(
            "The kubelet's PodResources API has not answered " + HOST_TEXT + " for "
            f"{thresholds.POD_RESOURCES_FAILING_FOR} (see gpu_exporter_pod_resources_status): "
            "gpu_allocation_info is missing and GpuAllocatedIdle cannot fire there."
        ),
        when="`gpu_exporter_pod_resources_up == 0` (the kubelet's allocations unreadable) for 10m",
        live=not_live("the simulated kubelet always answers"),
        runbook="""\
**Meaning:** for 10 minutes the exporter could not read the kubelet's PodResources API
(`gpu_exporter_pod_resources_up 0`), so `gpu_allocation_info` is missing and
[GpuAllocatedIdle](#gpuallocatedidle) cannot fire. `gpu_exporter_pod_resources_status` says why:

- `socket_missing`: `/var/lib/kubelet/pod-resources` is not mounted, or the kubelet uses another
  `--root-dir` (set the chart's `kubernetes.podResources.directory`);
- `permission_denied`: the exporter does not run as uid 0 (the socket is root-only);
- `unavailable`, `timeout`: the kubelet is down, restarting or overloaded;
- `too_large`: the answer exceeded `--kubernetes.pod-resources-max-bytes` (raise it; at most
  256 MiB);
- `rejected`: the kubelet's rate limit (another client calls it very often);
- `unimplemented`: a kubelet older than 1.20 (no v1 API).
""",
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
        audience="owner",
        summary="A user's process hit a CUDA out-of-memory error in PyTorch.",
        description=(
            "Processes of user {{ $labels.user }} on " + HOST_TEXT + " raised "
            "{{ $value | humanize }} PyTorch out-of-memory error(s) in the last "
            f"{thresholds.TORCH_OOM_WINDOW} (counted whether or not the program caught them). The "
            "node dashboard's row Inside the processes shows which one, with its tensors, cache "
            "and context."
        ),
        details=owners.details(owners.all_processes(), idle=False, end_commands=False),
        when="a user's PyTorch processes on a host raised an out-of-memory error in the last 10m",
        live=fires_under("torch-memory-pressure"),
        runbook="""\
**Meaning:** PyTorch raised `torch.cuda.OutOfMemoryError` in a process of the named user on that
host in the last 10 minutes (the exporter's per-user counter `gpu_user_torch_ooms_total` rose, or
a user's first publishing process on a GPU already counted one). The counter keeps the OOMs of
processes that have since exited, so a job that died of its OOM still fires; one alert per user
and host, never one per process. Programs often catch it (skip the batch, halve it, retry) and
run on, so the job may look healthy from outside. Needs the publisher in the process and
`--collector.torch`. **Impact:** lost or retried work; a job that catches OOMs in a loop makes
little progress.

1. Global: was the GPU full (fleet and node dashboards, memory used vs total)? Another process
   on the same GPU may have grown ([GpuMemoryAlmostFull](#gpumemoryalmostfull)).
2. Per process: node dashboard → *PyTorch allocator per process* (column *OOMs 1h*) names the
   process; *Process memory split*: tensors near the top means the work
   needs more memory than the GPU has left; a large cache or context of *other* processes
   means a neighbour is holding it; peak allocated shows how high the last step reached.
3. Code: [3b](#3b-then-inside-the-code-profiler-and-memory-snapshots): attach the OOM observer
   and dump a snapshot at the failing step; reduce the batch or sequence length, use activation
   checkpointing or mixed precision.
""",
    )
    retries = AlertRule(
        alert="GpuProcessTorchAllocRetries",
        expr=f"{TORCH_NEW_RETRIES} > {num(thresholds.TORCH_RETRIES_THRESHOLD)}",
        for_=thresholds.TORCH_RETRIES_FOR,
        severity="warning",
        audience="owner",
        summary="PyTorch keeps flushing its cache to satisfy allocations (fragmentation).",
        description=(
            "Processes of user {{ $labels.user }} on " + HOST_TEXT + " retried "
            "{{ $value | humanize }} failed cudaMalloc calls in "
            f"{thresholds.TORCH_RETRIES_WINDOW}, for {thresholds.TORCH_RETRIES_FOR}: each retry "
            "frees the allocator's cache and synchronises (slow steps), and the next failure is an "
            "out-of-memory error. Fragmentation (inactive split bytes) or a GPU shared too tightly."
        ),
        details=owners.details(owners.all_processes(), idle=False, end_commands=False),
        when="more than 3 allocation retries (cache flushes) in 15m, for 20m",
        live=fires_under("torch-memory-pressure"),
        runbook="""\
**Meaning:** for 20 minutes, the processes of the named user on that host needed more than 3
allocation retries per 15 minutes together (*Retries 1h* in the node dashboard's table names
the process): `cudaMalloc` failed, PyTorch freed its whole cache (synchronising the device) and
tried again, and succeeded. **Impact:** slow, jittery steps; memory is at the edge, so the next
failure is an out-of-memory error ([GpuProcessTorchOutOfMemory](#gpuprocesstorchoutofmemory)).

1. Node dashboard → *Process memory split* and *Fragmentation*: inactive split bytes high
   relative to reserved means fragmentation (varying tensor sizes: variable sequence lengths,
   dynamic shapes); set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (or
   `max_split_size_mb:<N>` on old versions) and restart the job.
2. Otherwise the GPU is simply too full: other processes' memory (node dashboard, *Processes*)
   or this process's own peak; lower the batch, or move a neighbour.
3. Confirm inside the code with `torch.cuda.memory_summary()` (*num_alloc_retries*) and a
   memory snapshot ([3b](#3b-then-inside-the-code-profiler-and-memory-snapshots)).
""",
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
    """Every alert group, in file order: the escalation of unresolved owner alerts last."""
    base = (memory_group(), idle_group(), idle_users_group(), thermal_group(), health_group(),
            health_alerts.xid_group(), health_alerts.memory_repair_group(), torch_group(),
            exporter_group())
    return (*base, escalation.group(base))


def all_alerts() -> tuple[AlertRule, ...]:
    """Every alerting rule across the groups."""
    return tuple(r for g in groups() for r in g.rules if isinstance(r, AlertRule))


def all_records() -> tuple[RecordingRule, ...]:
    """The recording rules that live in the alert groups (alerts read them)."""
    return tuple(r for g in groups() for r in g.rules if isinstance(r, RecordingRule))
