"""Per-job (and per-pod) summaries from Prometheus: what each GPU the workload held did.

A workload *holds* a GPU at a moment when an allocation names it there (``gpu_allocation_info``
with its ``slurm_job``, or its ``namespace``/``pod``), or when its processes hold memory on it
(``gpu_workload_memory_used_bytes``). Every figure is one query of that held-expression over
the workload's time, sampled every ``step`` seconds (a subquery ``[duration:step]``
evaluated at the end), one series per GPU; the figures of one GPU are keyed by the scrape job,
the instance and the GPU's UUID. Jobstats' queries have the same shape (``avg_over_time((
nvidia_gpu_duty_cycle and nvidia_gpu_jobId == 123)[3600s:])``).

``FIGURES`` is the table: each figure's key, what it means, its unit and its query. A figure
that Prometheus has no data for (GPM off or unsupported, no PyTorch publisher) is absent, never
0. The notes a GPU gets are ``exporter.catalogue.job_notes``'s. A figure added to the table
(a cost, say) reaches the text, JSON and stored summaries with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from exporter.catalogue import job_notes, metrics, records, thresholds
from exporter.catalogue.metrics.jobstats import JOBSTATS_MEMORY_TOTAL
from exporter.report.client import PrometheusClient, Sample
from exporter.report.costs import WorkloadCost, workload_cost
from exporter.report.timerange import TimeRange

__all__ = ["FIGURES", "Figure", "GpuSummary", "JobSummary", "Workload", "build_summary",
           "held_span"]

#: The labels that tell one GPU apart across a fleet (scrape job, target, UUID).
GPU_KEY = ("job", "instance", "uuid")
_ON = f"on ({', '.join(GPU_KEY)})"
_BY = "by (job, instance, gpu, uuid)"


@dataclass(frozen=True, slots=True)
class Workload:
    """What a summary is of: a Slurm job (``kind`` "job", ``name`` its id) or a pod ("pod",
    ``namespace/pod``), and the label matchers that select its series."""

    kind: str
    name: str
    matchers: str

    @classmethod
    def job(cls, job_id: str) -> Workload:
        """A Slurm job by its id (``slurm_job`` on the exporter's series).

        Raises:
            ValueError: not a job id (digits, or a SLUID).
        """
        if not job_id.isalnum():
            raise ValueError(f"{job_id!r} is not a Slurm job id")
        return cls("job", job_id, f'slurm_job="{job_id}"')

    @classmethod
    def pod(cls, namespaced: str) -> Workload:
        """A pod as ``namespace/pod``.

        Raises:
            ValueError: not ``namespace/pod`` (names of letters, digits, ``-`` and ``.``).
        """
        namespace, _, pod = namespaced.partition("/")
        allowed = set("abcdefghijklmnopqrstuvwxyz0123456789-.")
        if not namespace or not pod or not set(namespace + pod) <= allowed:
            raise ValueError(f"{namespaced!r} is not namespace/pod")
        return cls("pod", namespaced, f'namespace="{namespace}", pod="{pod}"')

    @property
    def title(self) -> str:
        """``job 913377`` / ``pod ml/trainer-0``."""
        return f"{self.kind} {self.name}"


@dataclass(frozen=True, slots=True)
class Query:
    """What every figure's query is built from."""

    held: str  # 1 per GPU while the workload holds it
    workload: str  # the workload's matchers (with the extra ones)
    extra: str  # the extra matchers alone (a cluster)
    window: str  # "[<duration>s:<step>s]"
    step: float

    def sel(self, metric: metrics.Metric, *more: str) -> str:
        """``metric`` with the extra matchers (and ``more``)."""
        inner = ", ".join(m for m in (self.extra, *more) if m)
        return f"{metric.name}{{{inner}}}" if inner else metric.name

    def own(self, metric: metrics.Metric) -> str:
        """``metric`` of the workload's own series (its processes, its allocations)."""
        return f"{metric.name}{{{self.workload}}}"

    def while_held(self, expr: str) -> str:
        """``expr`` (per GPU) at the moments the workload held the GPU."""
        return f"({expr} and {_ON} {self.held})"


@dataclass(frozen=True, slots=True)
class Figure:
    """One figure of a GPU: its key (JSON, stored summary), what it is, its unit ("ratio"
    0-1, "bytes", "seconds", "joules" or "" for a label value), and its query."""

    key: str
    title: str
    unit: str
    query: Callable[[Query], str]


def _activity(q: Query) -> str:
    """How busy the GPU was: SM activity where it reports one, else utilisation."""
    return f"({q.sel(metrics.SM_ACTIVE)} or {q.sel(metrics.UTILIZATION)})"


def _idle(q: Query) -> str:
    """The moments the workload held the GPU for nothing: no process of it on the GPU, or the
    GPU under the idle threshold (the definition of the GpuAllocatedIdle alert)."""
    ratio = thresholds.IDLE_UTILIZATION_RATIO
    return (f"count_over_time((({q.held} unless {_ON} {q.own(metrics.WORKLOAD_MEMORY)}) "
            f"or ({q.held} and {_ON} ({_activity(q)} < {ratio}))){q.window}) * {q.step:g}")


def _mean(metric: metrics.Metric, *more: str) -> Callable[[Query], str]:
    def build(q: Query) -> str:
        series = q.sel(metric, *more)
        if more:  # a labelled row (one pipe): without its extra label, to match per GPU
            series = f"max without ({metric.labels[-1]}) ({series})"
        return f"avg_over_time({q.while_held(series)}{q.window})"
    return build


def _peak(metric: metrics.Metric) -> Callable[[Query], str]:
    return lambda q: f"max_over_time({q.while_held(q.sel(metric))}{q.window})"


def _own_peak(metric: metrics.Metric) -> Callable[[Query], str]:
    return lambda q: f"max_over_time((sum {_BY} ({q.own(metric)})){q.window})"


FIGURES: tuple[Figure, ...] = (
    Figure(job_notes.HELD_KEY, "time held", "seconds",
           lambda q: f"count_over_time(({q.held}){q.window}) * {q.step:g}"),
    Figure(job_notes.UTILIZATION_KEY, "mean utilisation", "ratio", _mean(metrics.UTILIZATION)),
    Figure(job_notes.SM_ACTIVE_KEY, "mean SM activity", "ratio", _mean(metrics.SM_ACTIVE)),
    Figure(job_notes.TENSOR_ACTIVE_KEY, "mean tensor activity", "ratio",
           _mean(metrics.TENSOR_ACTIVE)),
    Figure(job_notes.FP32_PIPE_KEY, "mean FP32 pipe activity", "ratio",
           _mean(metrics.PIPE_ACTIVE, 'pipe="fp32"')),
    Figure("memory_total_bytes", "GPU memory", "bytes", _peak(metrics.MEMORY_TOTAL)),
    Figure("memory_peak_bytes", "peak GPU memory used (whole GPU)", "bytes",
           _peak(metrics.MEMORY_USED)),
    Figure("process_memory_peak_bytes", "peak memory of its processes (driver)", "bytes",
           _own_peak(metrics.WORKLOAD_MEMORY)),
    Figure("torch_allocated_peak_bytes", "peak PyTorch allocated", "bytes",
           _own_peak(metrics.TORCH_PEAK_ALLOCATED)),
    Figure(job_notes.IDLE_KEY, "time held idle", "seconds", _idle),
    Figure("energy_joules", "energy", "joules",
           lambda q: f"sum_over_time({q.while_held(q.sel(metrics.POWER_USAGE))}{q.window}) "
                     f"* {q.step:g}"),
)


@dataclass(slots=True)
class GpuSummary:
    """One GPU the workload held: where, which, its figures (by ``Figure.key``) and notes."""

    node: str
    gpu: str
    uuid: str
    model: str = ""
    minor_number: str = ""
    figures: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class JobSummary:
    """A workload's summary. ``source``: "prometheus", or "stored" for one decoded from the
    job's AdminComment. ``cpu``: Jobstats' per-node CPU figures (cpus, total_time,
    total_memory, used_memory) where the site's cgroup exporter has them."""

    kind: str
    name: str
    start: float
    end: float
    user: str = ""
    state: str = ""
    source: str = "prometheus"
    gpu_count: int = 0
    gpus: list[GpuSummary] = field(default_factory=list)
    cpu: dict[str, dict[str, float]] = field(default_factory=dict)
    #: What it cost, from the cost records (None: no prices set, or a stored summary), and
    #: the Slurm account it is billed to where Slurm knows it.
    cost: WorkloadCost | None = None
    account: str = ""

    @property
    def title(self) -> str:
        """``job 913377`` / ``pod ml/trainer-0``."""
        return f"{self.kind} {self.name}"


def node_of(instance: str) -> str:
    """The node of a scrape target: its instance without the port (as Jobstats names it)."""
    host, colon, port = instance.rpartition(":")
    return host.strip("[]") if colon and port.isdigit() else instance


def held_expr(workload: Workload, extra: str) -> str:
    """1 per GPU (``job, instance, gpu, uuid``) while the workload holds it."""
    matchers = ", ".join(m for m in (extra, workload.matchers) if m)
    return (f"(max {_BY} ({metrics.ALLOCATION_INFO.name}{{{matchers}, uuid!=\"\"}}) "
            f"or max {_BY} ({metrics.WORKLOAD_MEMORY.name}{{{matchers}}} * 0 + 1))")


def held_span(client: PrometheusClient, workload: Workload, search: TimeRange, extra: str,
              step: float) -> TimeRange | None:
    """When the workload held a GPU within ``search`` (first and last sample), or None."""
    held = held_expr(workload, extra)
    window = f"[{round(search.seconds)}s:{step:g}s]"
    first = client.query(f"min(min_over_time(timestamp({held}){window}))", search.end)
    last = client.query(f"max(max_over_time(timestamp({held}){window}))", search.end)
    if not first or not last:
        return None
    return TimeRange(first[0].value, max(last[0].value, first[0].value + step))


def _key(sample: Sample) -> tuple[str, str, str]:
    return tuple(sample.labels.get(label, "") for label in GPU_KEY)  # type: ignore[return-value]


def build_summary(client: PrometheusClient, workload: Workload, span: TimeRange, *,
                  extra: str = "", step: float = 30.0, user: str = "", state: str = "",
                  gpu_count: int | None = None) -> JobSummary:
    """Query every figure of every GPU the workload held within ``span``.

    Raises:
        ReportError: Prometheus unreachable or erroring.
    """
    held = held_expr(workload, extra)
    workload_matchers = ", ".join(m for m in (extra, workload.matchers) if m)
    window = f"[{max(round(span.seconds), 1)}s:{step:g}s]"
    query = Query(held, workload_matchers, extra, window, step)
    gpus: dict[tuple[str, str, str], GpuSummary] = {}
    for figure in FIGURES:
        for sample in client.query(figure.query(query), span.end):
            key = _key(sample)
            if figure.key == job_notes.HELD_KEY:
                gpus[key] = GpuSummary(node_of(key[1]), sample.labels.get("gpu", ""), key[2])
            found = gpus.get(key)
            if found is not None:
                found.figures[figure.key] = sample.value
    for gpu_summary in gpus.values():  # held and never idle: no sample, 0 seconds
        gpu_summary.figures.setdefault(job_notes.IDLE_KEY, 0.0)
    _identify(client, query, span, gpus)
    summary = JobSummary(workload.kind, workload.name, span.start, span.end, user=user,
                         state=state, gpus=sorted(gpus.values(), key=_order))
    summary.gpu_count = gpu_count if gpu_count is not None else len(summary.gpus)
    if workload.kind == "job":
        summary.cpu = cgroup_figures(client, workload.name, span, extra)
    level = records.JOB if workload.kind == "job" else records.POD
    summary.cost = workload_cost(client, level, workload_matchers, span)
    finish(summary)
    return summary


def _identify(client: PrometheusClient, query: Query, span: TimeRange,
              gpus: dict[tuple[str, str, str], GpuSummary]) -> None:
    """The GPUs' model (``gpu_info``) and minor number (the jobstats group's series)."""
    info = f"last_over_time({query.while_held(query.sel(metrics.GPU_INFO))}{query.window})"
    for sample in client.query(f"max by (job, instance, uuid, name) ({info})", span.end):
        found = gpus.get(_key(sample))
        if found is not None:
            found.model = sample.labels.get("name", "")
    whole = query.sel(JOBSTATS_MEMORY_TOTAL, 'GPU_I_ID=""')  # not its MIG devices
    minors = (f"max by (job, instance, uuid, minor_number) (last_over_time({whole}"
              f"{query.window}))")
    for sample in client.query(minors, span.end):
        found = gpus.get(_key(sample))
        if found is not None:
            found.minor_number = sample.labels.get("minor_number", "")


def _order(gpu: GpuSummary) -> tuple[str, int, str]:
    return gpu.node, int(gpu.gpu) if gpu.gpu.isdigit() else -1, gpu.uuid


#: Jobstats' CPU fields per node and the cgroup exporter series it reads them from (max over
#: the job's time), selected by ``jobid`` as Jobstats selects them.
CGROUP_FIELDS = (("total_memory", "cgroup_memory_total_bytes"),
                 ("used_memory", "cgroup_memory_rss_bytes"),
                 ("total_time", "cgroup_cpu_total_seconds"),
                 ("cpus", "cgroup_cpus"))


def cgroup_figures(client: PrometheusClient, job_id: str, span: TimeRange,
                   extra: str) -> dict[str, dict[str, float]]:
    """Jobstats' per-node CPU figures of a job where Prometheus has the site's cgroup exporter
    series (none: an empty mapping)."""
    matchers = ", ".join(m for m in (extra, f'jobid="{job_id}", step="", task=""') if m)
    found: dict[str, dict[str, float]] = {}
    for key, name in CGROUP_FIELDS:
        expr = f"max_over_time({name}{{{matchers}}}[{max(round(span.seconds), 1)}s])"
        for sample in client.query(expr, span.end):
            node = node_of(sample.labels.get("instance", ""))
            found.setdefault(node, {})[key] = sample.value
    return found


def finish(summary: JobSummary) -> None:
    """Derived figures and the notes of every GPU (after querying or decoding)."""
    for gpu in summary.gpus:
        figures = gpu.figures
        total = figures.get("memory_total_bytes")
        peak = figures.get("process_memory_peak_bytes", figures.get("memory_peak_bytes"))
        if total and peak is not None:
            figures[job_notes.MEMORY_PEAK_SHARE_KEY] = peak / total
        gpu.notes = job_notes.notes_for(figures)


def gpu_totals(gpus: Iterable[GpuSummary]) -> dict[str, float]:
    """The workload's totals over its GPUs: time held and idle, energy (where known)."""
    totals: dict[str, float] = {}
    for gpu in gpus:
        for key in (job_notes.HELD_KEY, job_notes.IDLE_KEY, "energy_joules"):
            if key in gpu.figures:
                totals[key] = totals.get(key, 0.0) + gpu.figures[key]
    return totals
