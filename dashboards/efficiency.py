"""Dashboard 5: GPU efficiency - held versus used over the chosen range, and who holds it idle.

Range panels read the idle-accounting records (``dashboards/accounting.py``): one
``sum_over_time`` over per-minute records, never the raw per-process series over the range.
The forgotten-process table is an instant query scoped by the node and user variables and
capped with ``topk``.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard

from dashboards import variables as v
from dashboards.panels import (
    Column,
    Layout,
    board,
    query,
    stat_panel,
    steps,
    table_panel,
    timeseries_panel,
)
from dashboards.promql import NOT_OVERFLOW, num, seconds, sel
from exporter import metrics as c
from exporter import thresholds as t
from exporter.report import records as r

UID = "gpu-exporter-efficiency"
H = v.HOST
U = f"{H}, {v.USER}"
#: Rows in the per-process tables.
TOP = 20
_RANGE = "[$__range]"
#: Per-minute records -> range totals (seconds or byte-seconds).
_PER = f" * {r.INTERVAL_SECONDS}"
_GIB_HOURS = f" * {r.INTERVAL_SECONDS} / {num(t.GIB)} / 3600"
_KWH = f" * {r.INTERVAL_SECONDS} / 3600000"
USED_STEPS = steps(("red", None), ("orange", 0.25), ("green", 0.6))
PROCESS_HIDDEN = ("Time", "__name__", "job", "uuid", "uid")
ACCOUNTING = (
    "From the idle-accounting recording rules (dashboards/rules/gpu-exporter-accounting.yaml); "
    f"a process is idle in a minute when its SM utilisation averages under "
    f"{t.IDLE_UTILIZATION_RATIO:.0%}. GPU time is shared between a GPU's processes by the "
    "memory they hold."
)


def _total(level: r.Level, quantity: str, matchers: str, by: str) -> str:
    """The range total of one record, summed by ``by`` (empty: everything)."""
    inner = f"sum_over_time({sel_record(level.record(quantity), matchers)}{_RANGE})"
    return f"sum by ({by}) ({inner})" if by else f"sum({inner})"


def sel_record(name: str, matchers: str) -> str:
    return f"{name}{{{matchers}}}" if matchers else name


def _summary(grid: Layout) -> None:
    grid.row("Held versus used over the range")
    user = r.USER
    held = _total(user, r.HELD_GPUS, U, "")
    used = _total(user, r.USED_GPUS, U, "")
    for title, description, unit, expr, thresholds in (
        ("GPU time held", "GPU time held by processes over the range (GPU-seconds: a GPU "
         "held for a day shows 1 day).", "s", f"{held}{_PER}", None),
        ("GPU time used", "GPU time the processes' kernels actually ran (SM utilisation).", "s",
         f"{used}{_PER}", None),
        ("GPU time held idle", "GPU time of GPUs that idled while processes held them.", "s",
         f"{_total(user, r.IDLE_GPUS, U, '')}{_PER}", None),
        ("Used / held", "Share of the GPU time held that was used.", "percentunit",
         f"{used} / {held}", USED_STEPS),
        ("GiB-hours held idle", "Memory held by idle processes over the range, in GiB-hours.",
         "short", f"{_total(user, r.IDLE_MEMORY, U, '')}{_GIB_HOURS}", None),
        ("Energy (kWh)", "Energy of the GPUs, attributed to their users.", "short",
         f"{_total(user, r.POWER, U, '')}{_KWH}", None),
    ):
        grid.add(stat_panel(title, f"{description} {ACCOUNTING}", unit, query(expr),
                            thresholds=thresholds), 4, 4)


def _by(grid: Layout, title: str, level: r.Level, matchers: str, by: str, *,
        energy: bool) -> None:
    held = _total(level, r.HELD_GPUS, matchers, by)
    used = _total(level, r.USED_GPUS, matchers, by)
    columns = [
        Column("Held idle", f"{_total(level, r.IDLE_GPUS, matchers, by)}{_PER}", "s"),
        Column("Held", f"{held}{_PER}", "s"),
        Column("Used", f"{used}{_PER}", "s"),
        Column("Used / held", f"{used} / {held}", "percentunit", USED_STEPS),
        Column("Idle GiB-hours", f"{_total(level, r.IDLE_MEMORY, matchers, by)}{_GIB_HOURS}",
               "short"),
    ]
    if energy:
        columns.append(Column("kWh", f"{_total(level, r.POWER, matchers, by)}{_KWH}", "short"))
    grid.add(table_panel(
        title, "GPU time held idle, held and used over the range, and memory held idle. "
        + ACCOUNTING, columns, sort_by="Held idle",
    ), 12, 8)


def _tables(grid: Layout) -> None:
    grid.row("Who holds GPUs idle")
    _by(grid, "Per user", r.USER, U, "user", energy=True)
    _by(grid, "Per namespace and pod", r.POD, H, "namespace, pod", energy=False)
    grid.add(timeseries_panel(
        "GPUs held idle, by user", "GPUs (memory shares of idle GPUs) held by each user's idle "
        "processes, minute by minute. " + ACCOUNTING, "short",
        [query(f"sum by (user) ({sel_record(r.USER.record(r.IDLE_GPUS), U)})", "{{user}}")],
        stacked=True, min_val=0,
    ), 12)
    grid.add(timeseries_panel(
        "Memory held idle, by user", "GPU memory held by each user's idle processes, minute by "
        "minute. " + ACCOUNTING, "bytes",
        [query(f"sum by (user) ({sel_record(r.USER.record(r.IDLE_MEMORY), U)})", "{{user}}")],
        stacked=True, min_val=0,
    ), 12)


def _processes(grid: Layout) -> None:
    grid.row("Forgotten processes")
    idle = sel_record(r.PROCESS_IDLE_MEMORY, U)
    best = f"topk({TOP}, sum_over_time({idle}{_RANGE}))"
    grid.add(table_panel(
        "Top idle holders over the range", f"The {TOP} processes that held the most memory "
        "while idle over the range: GiB-hours, time idle, largest memory held idle. "
        + ACCOUNTING,
        [
            Column("Idle GiB-hours", f"{best}{_GIB_HOURS}", "short"),
            Column("Time idle", f"count_over_time({idle}{_RANGE}){_PER} and {best}", "s"),
            Column("Memory held idle (max)", f"max_over_time({idle}{_RANGE}) and {best}",
                   "bytes"),
        ],
        hidden=PROCESS_HIDDEN, sort_by="Idle GiB-hours",
    ), 24, 8)
    memory = sel(c.PROCESS_MEMORY, U, NOT_OVERFLOW)
    last = sel(c.PROCESS_LAST_ACTIVE, U, NOT_OVERFLOW)
    idle_for = f"time() - {last}"
    forgotten = (f"topk({TOP}, {memory} > {num(t.IDLE_PROCESS_MEMORY_BYTES)} "
                 f"and ({idle_for}) > {seconds(t.IDLE_FOR)})")
    grid.add(table_panel(
        "Forgotten processes now", f"Processes holding over "
        f"{num(t.IDLE_PROCESS_MEMORY_BYTES / t.GIB)} GiB whose kernels last ran over "
        f"{t.IDLE_FOR} ago (gpu_process_last_active_timestamp_seconds), largest first: idle "
        "for, age, memory. A process with no kernel seen since the exporter started is not "
        "listed (its last activity is unknown).",
        [
            Column("Memory", forgotten, "bytes"),
            Column("Idle for", f"({idle_for}) and {forgotten}", "s",
                   steps(("orange", None), ("red", float(24 * 3600)))),
            Column("Age", f"(time() - {sel(c.PROCESS_START_TIME, U, NOT_OVERFLOW)}) "
                   f"and {forgotten}", "s"),
        ],
        hidden=PROCESS_HIDDEN, sort_by="Memory",
    ), 24, 8)


def build() -> dashboard.Dashboard:
    """The efficiency dashboard builder."""
    built = board(
        "GPU efficiency", UID,
        "GPU time and memory held versus used over the chosen range, who holds GPUs idle, and "
        "forgotten processes.",
        v.host_chain(v.user()), since="now-7d", refresh="5m",
    )
    grid = Layout(built)
    _summary(grid)
    _tables(grid)
    _processes(grid)
    return built
