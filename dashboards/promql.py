"""PromQL building blocks shared by the rules and the dashboards.

Metric names are taken from the rows in ``exporter.catalogue.metrics`` only; this module never
types one.
"""

from __future__ import annotations

from dashboards.settings import Token
from exporter.catalogue import metrics
from exporter.catalogue.settings import TOKEN_CLOSE, TOKEN_OPEN
from exporter.catalogue.workloads import KINDS, group_by_names

#: The labels that name an allocation's workload on ``gpu_allocation_info`` and on the
#: per-workload families alike (``namespace, pod`` for pods, ``slurm_job`` for Slurm jobs).
ALLOCATION_KEYS = ", ".join(group_by_names(k for k in KINDS if k.allocation_labels))
#: An allocation of a pod (not a Slurm job's).
POD_ALLOCATION = 'pod!=""'

#: Labels a per-GPU series carries beyond the target's own (job, instance, node, ...).
GPU_LABELS = ", ".join(metrics.GPU_LABELS)
NOT_OVERFLOW = f'process!="{metrics.OVERFLOW_VALUE}"'


def num(value: float) -> str:
    """A number as PromQL literal text: ``0.9``, ``80``, ``1073741824`` (a setting while the
    chart's copy is built: its placeholder, ``dashboards.settings``)."""
    if isinstance(value, Token):
        return format(value, "")
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def gib(value: float) -> str:
    """A byte count in GiB, as ``num`` writes it: ``4``, ``1.5``."""
    if isinstance(value, Token):
        return format(value, "gib")
    return num(value / 1024**3)


def sel(metric: metrics.Metric, *matchers: str) -> str:
    """``metric{m1, m2}`` (or the bare name without matchers)."""
    return sel_record(metric.name, *matchers)


def sel_record(record: str, *matchers: str) -> str:
    """``record{m1, m2}``: a recording rule's series (named in dashboards.recording/alerts)."""
    inner = ", ".join(m for m in matchers if m)
    return f"{record}{{{inner}}}" if inner else record


def count_or_zero(expr: str) -> str:
    """How many series ``expr`` returns, as 0 rather than no data when it returns none."""
    return f"count({expr}) or vector(0)"


def reason_in(reasons: tuple[str, ...]) -> str:
    """A ``reason`` matcher for exactly these throttle reasons (snake_case, no regex chars)."""
    return 'reason=~"' + "|".join(reasons) + '"'


def throttled(reasons: tuple[str, ...], share: float, window: str) -> str:
    """GPUs whose clocks one of ``reasons`` holds back: by the time counters where the GPU
    reports them (``gpu_throttle_seconds_total``: slowed more than ``share`` of ``window``), by
    the active-reason gauge for the reasons it does not count (no time counter, or
    ``--collector.throttle_time`` off)."""
    matcher = reason_in(reasons)
    counted = sel(metrics.THROTTLE_TIME, matcher)
    return (f"rate({counted}[{window}]) > {num(share)} or ({sel(metrics.THROTTLE_ACTIVE, matcher)}"
            f" > 0 unless on (job, instance, uuid, reason) {counted})")


def seconds(duration: str) -> int:
    """A simple Prometheus duration ("30m", "1h", "15s", "1w") in seconds.

    Raises:
        ValueError: not a single number followed by s, m, h, d or w.
    """
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    number, unit = duration[:-1], duration[-1:]
    if unit not in units or not number.isdigit():
        raise ValueError(f"unsupported duration {duration!r}")
    return int(number) * units[unit]


def seconds_text(duration: str) -> str:
    """A duration's seconds as PromQL number text (a setting's placeholder while the chart's
    copy is built: ``⟦idleFor|seconds⟧``)."""
    if duration.startswith(TOKEN_OPEN):
        return duration.removesuffix(TOKEN_CLOSE) + "|seconds" + TOKEN_CLOSE
    return str(seconds(duration))


#: Recorded by dashboards.recording: one series per scrape target carrying gpu_info's hostname.
HOSTNAME_RECORD = "instance_hostname:gpu_info:max"


def with_hostname(expr: str, matchers: str) -> str:
    """Adds the target's ``hostname`` (from gpu_info, recorded once per target) to a per-GPU or
    per-target expression: the join reads one series per node, not one per GPU."""
    return (
        f"({expr}) * on (job, instance) group_left (hostname) "
        f"{HOSTNAME_RECORD}{{{matchers}}}"
    )


def idle_process_filter(matchers: str, memory_bytes: float, ratio: float, window: str) -> str:
    """Processes holding more than ``memory_bytes`` whose utilisation stayed under ``ratio`` at
    every sample of ``window`` (the per-process view of the gpu-idle recording rules)."""
    mem = sel(metrics.PROCESS_MEMORY, matchers, NOT_OVERFLOW)
    busy = sel(metrics.PROCESS_UTILIZATION, matchers, NOT_OVERFLOW)
    return f"{mem} > {num(memory_bytes)} and max_over_time({busy}[{window}]) < {num(ratio)}"


def activity_average(matchers: str, window: str) -> str:
    """Per GPU, the average over ``window`` of how busy it really was: SM activity where the
    GPU reports it (GPM), utilisation where it does not. ``or`` keeps the SM series of a GPU
    that has one, so one expression serves a fleet of both kinds."""
    return (f"avg_over_time({sel(metrics.SM_ACTIVE, matchers)}[{window}])\n"
            f"or avg_over_time({sel(metrics.UTILIZATION, matchers)}[{window}])")


def exclusive_allocation(host: str, *matchers: str) -> str:
    """Allocations of whole GPUs (not MIG devices) that one container (or Slurm job) owns
    alone."""
    return sel(metrics.ALLOCATION_INFO, host, *matchers, 'sharing="exclusive"', 'gpu_instance=""',
               'uuid!=""')


def owned(metric: metrics.Metric, host: str, *matchers: str) -> str:
    """A per-GPU ``metric`` of the GPUs one pod container owns alone, with that container's
    ``namespace``, ``pod`` and ``container`` labels (a shared GPU's numbers are not split)."""
    return (f"{sel(metric, host)} * on (job, instance, uuid) group_left (namespace, pod, "
            f"container) {exclusive_allocation(host, *matchers, POD_ALLOCATION)}")


def allocated_idle(host: str, *matchers: str, ratio: float, window: str,
                   average: str | None = None) -> str:
    """Allocations (series of ``gpu_allocation_info``) holding a GPU for nothing: no process of
    the pod (or Slurm job) on the GPU, or a GPU the container (or job) owns alone with average
    activity under ``ratio`` over ``window`` (``average``: a recorded per-GPU average over
    that window, read instead of the raw window)."""
    allocated = sel(metrics.ALLOCATION_INFO, host, *matchers, 'uuid!=""')
    processes = sel(metrics.WORKLOAD_MEMORY, host)
    activity = average or f"({activity_average(host, window)})"
    return (
        f"({allocated} unless on (job, instance, uuid, {ALLOCATION_KEYS}) {processes})\n"
        f"or ({exclusive_allocation(host, *matchers)} and on (job, instance, uuid) "
        f"{activity} < {num(ratio)})"
    )
