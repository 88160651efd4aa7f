"""A week on two GPU hosts, as exporter samples (OpenMetrics) and as ground truth.

The processes are functions of time (memory, SM utilisation, alive or not). ``openmetrics``
writes what gpu-exporter would have exposed every ``SCRAPE`` seconds; ``truth`` integrates the
same functions on a fine grid with the report's documented definitions (idle: utilisation
under the threshold; GPU time shared by memory; power split by SM share, by memory when
nothing ran), independently of PromQL. Who does what:

- alice forgets a notebook holding 30 GiB alone on h1 GPU 0 for the whole week;
- bob trains on h1 GPU 1 at 90 % for five days, then his job ends;
- carol's pod on h2 GPU 0 leaks memory (2 -> 50 GiB over four days): busy for half a day,
  then idle until it ends on day 5;
- dave's Slurm job on h2 GPU 1 computes six hours a day at 80 %, idling in between, next to
  erin's idle 10 GiB process;
- erin's process started three days before the exporter first saw it;
- root's Xorg holds 0.2 GiB on h1 GPU 1 all week (a display server: never a forgotten process);
- h2's exporter restarts on day 3 (10 minutes without samples); h1's energy counter resets
  on day 4 (driver reload). h1's GPUs are H100s, h2's A100s (priced apart).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from exporter import snapshot
from exporter.attribution.accounting import IdleAccounting
from exporter.attribution.workloads import select
from exporter.catalogue.metrics import ACCOUNTING_ROWS, POWER_USAGE, UTILIZATION
from exporter.catalogue.workloads import KINDS

GIB = 1024**3
DAY = 86400
SCRAPE = 60
IDLE_RATIO = 0.05  # exporter.catalogue.thresholds.IDLE_UTILIZATION_RATIO (asserted by the test)
GPU_TOTAL = 80 * GIB
BUSY_WATTS, IDLE_WATTS = 300.0, 70.0
RESTART = (3 * DAY + 7200, 3 * DAY + 7200 + 600)  # h2 gives no samples in [a, b)
ENERGY_RESET = 4 * DAY + 1800  # h1's energy counter restarts from 0


@dataclass(frozen=True)
class Process:
    """One GPU process; times are seconds from the scenario start."""

    host: str
    gpu: str
    pid: str
    name: str
    user: str
    start: float
    end: float
    memory: Callable[[float], float]
    util: Callable[[float], float]
    labels: dict[str, str] = field(default_factory=dict)
    #: When the process started, if before the exporter first saw it (``start``).
    started: float | None = None

    @property
    def start_time(self) -> float:
        """Its start as ``gpu_process_start_time_seconds`` says (seconds from the start)."""
        return self.start if self.started is None else self.started

    def alive(self, t: float) -> bool:
        return self.start <= t < self.end


def _const(value: float) -> Callable[[float], float]:
    return lambda t: value


def _leak(t: float) -> float:
    return min(50.0, 2.0 + 48.0 * max(0.0, t - 3600) / (4 * DAY)) * GIB


def _daily(t: float) -> float:
    return 0.8 if (t % DAY) < 6 * 3600 else 0.0


WEEK = 7 * DAY
PROCESSES = (
    Process("h1", "0", "1001", "jupyter", "alice", 2 * 3600, WEEK + DAY, _const(30 * GIB),
            _const(0.0)),
    Process("h1", "1", "2001", "train", "bob", 3600, 5 * DAY, _const(60 * GIB), _const(0.9)),
    Process("h2", "0", "3001", "python", "carol", 3600, 5 * DAY, _leak,
            lambda t: 0.6 if t < 13 * 3600 else 0.0,
            {"namespace": "ml", "pod": "leaky-0", "container": "main"}),
    Process("h2", "1", "4001", "sbatch-run", "dave", 0, WEEK + DAY, _const(40 * GIB), _daily,
            {"slurm_job": "4242"}),
    Process("h2", "1", "5001", "python", "erin", 1800, WEEK + DAY, _const(10 * GIB),
            _const(0.0), started=-3 * DAY),
    Process("h1", "1", "601", "Xorg", "root", 0, WEEK + DAY, _const(0.2 * GIB), _const(0.0)),
)
#: The model name of each host's GPUs (gpu_info), for the cost rules' prices.
MODELS = {"h1": "NVIDIA H100 80GB HBM3", "h2": "NVIDIA A100-SXM4-80GB"}
GPUS = (("h1", "0"), ("h1", "1"), ("h2", "0"), ("h2", "1"))


def visible(host: str, t: float) -> bool:
    """Whether the host's exporter was scraped at ``t`` (not restarting)."""
    return not (host == "h2" and RESTART[0] <= t < RESTART[1])


def on_gpu(host: str, gpu: str, t: float) -> list[Process]:
    return [p for p in PROCESSES if (p.host, p.gpu) == (host, gpu) and p.alive(t)]


def gpu_util(host: str, gpu: str, t: float) -> float:
    return min(1.0, sum(p.util(t) for p in on_gpu(host, gpu, t)))


def gpu_power(host: str, gpu: str, t: float) -> float:
    return IDLE_WATTS + (BUSY_WATTS - IDLE_WATTS) * gpu_util(host, gpu, t)


def _labels(host: str, gpu: str, **extra: str) -> str:
    pairs = {"instance": f"{host}:9400", "gpu": gpu, "uuid": f"GPU-{host}-{gpu}", **extra}
    return "{" + ",".join(f'{k}="{v}"' for k, v in pairs.items()) + "}"


def _host_labels(host: str, **extra: str) -> str:
    pairs = {"instance": f"{host}:9400", **extra}
    return "{" + ",".join(f'{k}="{v}"' for k, v in pairs.items()) + "}"


def _process_labels(p: Process) -> str:
    return _labels(p.host, p.gpu, pid=p.pid, process=p.name, user=p.user,
                   uid=str(1000 + sum(map(ord, p.user)) % 1000), **p.labels)


@functools.lru_cache(maxsize=8)
def _energy(host: str, gpu: str) -> dict[int, float]:
    """The energy counter at each scrape: integrated power since the last reset."""
    table, joules = {}, 0.0
    for step in range(0, WEEK + DAY, SCRAPE):
        if step == ENERGY_RESET:
            joules = 0.0
        joules += gpu_power(host, gpu, float(step)) * SCRAPE
        table[step] = joules
    return table


@functools.lru_cache(maxsize=16)
def _last_busy(pid: str) -> dict[int, int]:
    """Scrape step -> the latest step at or before it in which the process computed."""
    proc = next(p for p in PROCESSES if p.pid == pid)
    table, last = {}, None
    for step in range(0, WEEK + DAY, SCRAPE):
        if proc.alive(step) and proc.util(step) > 0:
            last = step
        if last is not None:
            table[step] = last
    return table


def _workload(labels: dict[str, str]) -> snapshot.Workload | None:
    """A process's workload, as enrichment fills it from the labels its series carry."""
    for kind in KINDS:
        if set(kind.labels) & labels.keys():
            return snapshot.Workload(kind.name, {name: labels.get(name, "")
                                                 for name in kind.labels})
    return None


def _snapshot(host: str, t: float) -> snapshot.Snapshot:
    """What the host's exporter collected at ``t`` (only what idle accounting reads)."""
    gpus = []
    for h, g in GPUS:
        if h != host:
            continue
        processes = tuple(
            snapshot.GpuProcess(
                int(p.pid), snapshot.ProcessType.COMPUTE, round(p.memory(t)), p.util(t),
                owner=snapshot.ProcessOwner(1000, p.user, p.name, p.start),
                workload=_workload(p.labels))
            for p in on_gpu(h, g, t))
        values = {UTILIZATION.name: gpu_util(h, g, t), POWER_USAGE.name: gpu_power(h, g, t)}
        identity = snapshot.GpuIdentity(int(g), f"GPU-{h}-{g}", "H100", g, GPU_TOTAL)
        gpus.append(snapshot.GpuReading(identity, values=values, processes=processes))
    return snapshot.Snapshot("nvml", host, t, 0.0, gpus=tuple(gpus))


@functools.lru_cache(maxsize=4)
def _accounting(host: str) -> dict[int, list[tuple[str, str, float]]]:
    """Scrape step -> (counter name, labels, value) of the host's accounting counters, from
    the exporter's own ``IdleAccounting`` fed every scrape (a fresh one after h2's restart,
    so its counters start again from 0)."""
    table: dict[int, list[tuple[str, str, float]]] = {}
    accounting = IdleAccounting(select("kubernetes", "slurm"))
    for step in range(0, WEEK + DAY, SCRAPE):
        if not visible(host, step):
            accounting = IdleAccounting(select("kubernetes", "slurm"))
            continue
        rows = accounting.enrich(_snapshot(host, float(step))).accounting
        table[step] = [
            (name, _host_labels(host, user=row.user, **row.workload), value)
            for row in rows for name, value in row.totals.items()]
    return table


def openmetrics(t0: float, begin: int, end: int) -> Iterator[str]:
    """OpenMetrics text of every series for the scrapes in ``[begin, end)`` seconds from the
    start (``# EOF`` last). promtool re-reads its whole input once per 2-hour block, so the
    test feeds it one file per block."""
    steps = range(begin - begin % SCRAPE + (SCRAPE if begin % SCRAPE else 0), end, SCRAPE)

    def per_gpu(fn: Callable[[str, str, float], float]) -> Callable[[float], list[
            tuple[str, float]]]:
        return lambda t: [(_labels(h, g), fn(h, g, t)) for h, g in GPUS if visible(h, t)]

    def per_process(fn: Callable[[Process, float], float]) -> Callable[[float], list[
            tuple[str, float]]]:
        return lambda t: [(_process_labels(p), fn(p, t)) for p in PROCESSES
                          if p.alive(t) and visible(p.host, t)]

    def per_user(t: float) -> list[tuple[str, float]]:
        out: dict[str, float] = {}
        for p in PROCESSES:
            if p.alive(t) and visible(p.host, t):
                key = _labels(p.host, p.gpu, user=p.user)
                out[key] = out.get(key, 0.0) + p.memory(t)
        return list(out.items())

    families: list[tuple[str, str, Callable[[float], list[tuple[str, float]]]]] = [
        ("gpu_memory_total_bytes", "gauge", per_gpu(lambda h, g, t: GPU_TOTAL)),
        ("gpu_utilization_ratio", "gauge", per_gpu(gpu_util)),
        ("gpu_power_usage_watts", "gauge", per_gpu(gpu_power)),
        ("gpu_process_memory_used_bytes", "gauge", per_process(lambda p, t: p.memory(t))),
        ("gpu_process_utilization_ratio", "gauge", per_process(lambda p, t: p.util(t))),
        ("gpu_process_start_time_seconds", "gauge",
         per_process(lambda p, t: t0 + p.start_time)),
        ("gpu_info", "gauge", lambda t: [
            (_labels(h, g, name=MODELS[h], hostname=h), 1.0) for h, g in GPUS
            if visible(h, t)]),
        ("gpu_exporter_build_info", "gauge", lambda t: [
            (_host_labels(h, version="test", source="nvml"), 1.0) for h in MODELS
            if visible(h, t)]),
        ("gpu_user_memory_used_bytes", "gauge", per_user),
    ]
    # The exporter's last-active time: present once the process's kernels were seen.
    families.append(("gpu_process_last_active_timestamp_seconds", "gauge", lambda t: [
        (_process_labels(p), t0 + _last_busy(p.pid)[int(t)]) for p in PROCESSES
        if p.alive(t) and visible(p.host, t) and int(t) in _last_busy(p.pid)]))
    for name, kind, fn in families:
        yield f"# TYPE {name} {kind}\n"
        for step in steps:
            for labels, value in fn(float(step)):
                yield f"{name}{labels} {value:.17g} {t0 + step:.0f}\n"
    for row in ACCOUNTING_ROWS:
        yield f"# TYPE {row.family_name} counter\n"
        for step in steps:
            for host in ("h1", "h2"):
                for name, labels, value in _accounting(host).get(step, ()):
                    if name == row.name:
                        yield f"{name}{labels} {value:.17g} {t0 + step:.0f}\n"
    # The opt-in energy counter, on h1 only (h2's energy comes from its power gauge).
    yield "# TYPE gpu_energy_consumed_joules counter\n"
    for step in steps:
        for h, g in GPUS:
            if h == "h1":
                value = _energy(h, g)[step]
                labels = _labels(h, g)
                yield f"gpu_energy_consumed_joules_total{labels} {value:.17g} {t0 + step:.0f}\n"
    yield "# EOF\n"


@dataclass
class Truth:
    """Ground truth per user (and per pod, per job): seconds, byte-seconds, joules."""

    users: dict[str, dict[str, float]]
    pods: dict[tuple[str, str], dict[str, float]]
    jobs: dict[tuple[str, str], dict[str, float]]
    processes: dict[str, dict[str, float]]


def truth(start: float, end: float, step: float = 10.0) -> Truth:
    """Integrate the scenario over ``[start, end)`` (seconds from its start)."""
    zero = ("idle_gpu_seconds", "idle_byte_seconds", "held_gpu_seconds", "held_byte_seconds",
            "used_gpu_seconds", "energy_joules")
    users: dict[str, dict[str, float]] = {}
    pods: dict[tuple[str, str], dict[str, float]] = {}
    jobs: dict[tuple[str, str], dict[str, float]] = {}
    procs: dict[str, dict[str, float]] = {}
    for i in range(math.ceil((end - start) / step)):
        t = start + i * step
        for host, gpu in GPUS:
            if not visible(host, t):
                continue
            here = on_gpu(host, gpu, t)
            mem = sum(p.memory(t) for p in here)
            util = sum(p.util(t) for p in here)
            gpu_idle = gpu_util(host, gpu, t) < IDLE_RATIO
            for p in here:
                idle = p.util(t) < IDLE_RATIO
                share = p.memory(t) / mem if mem else 0.0
                power_share = p.util(t) / util if util > 0 else share
                add = {
                    "idle_gpu_seconds": share * step if idle and gpu_idle else 0.0,
                    "idle_byte_seconds": p.memory(t) * step if idle else 0.0,
                    "held_gpu_seconds": share * step,
                    "held_byte_seconds": p.memory(t) * step,
                    "used_gpu_seconds": p.util(t) * step,
                    "energy_joules": gpu_power(host, gpu, t) * power_share * step,
                }
                targets = [users.setdefault(p.user, dict.fromkeys(zero, 0.0))]
                if "pod" in p.labels:
                    targets.append(pods.setdefault((p.labels["namespace"], p.labels["pod"]),
                                                   dict.fromkeys(zero, 0.0)))
                if "slurm_job" in p.labels:
                    targets.append(jobs.setdefault((p.labels["slurm_job"], p.user),
                                                   dict.fromkeys(zero, 0.0)))
                for target in targets:
                    for key, value in add.items():
                        target[key] += value
                row = procs.setdefault(p.pid, {"idle_byte_seconds": 0.0, "idle_seconds": 0.0})
                if idle:
                    row["idle_byte_seconds"] += p.memory(t) * step
                    row["idle_seconds"] += step
    return Truth(users, pods, jobs, procs)


def forgotten(start: float, end: float, minimum: float) -> dict[str, dict[str, float]]:
    """Per process, its longest idle stretch within ``[start, end]`` (seconds from the scenario
    start) and the largest memory x stretch, on the scrape grid: a stretch runs from the last
    scrape that saw its kernels run (or its start, or ``start``) and counts over ``minimum``."""
    found: dict[str, dict[str, float]] = {}
    for p in PROCESSES:
        busy = _last_busy(p.pid)
        row = {"idle_byte_seconds": 0.0, "idle_seconds": 0.0}
        for step in range(0, WEEK + DAY, SCRAPE):
            if not start <= step <= end or not p.alive(step) or not visible(p.host, step):
                continue
            stretch = step - max(busy.get(step, p.start_time), start)
            if stretch > minimum:
                row["idle_seconds"] = max(row["idle_seconds"], stretch)
                row["idle_byte_seconds"] = max(row["idle_byte_seconds"], p.memory(step) * stretch)
        if row["idle_seconds"]:
            found[p.pid] = row
    return found
