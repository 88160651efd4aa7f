"""Dashboard 3: users and processes - who holds memory, who holds it idle, and when it runs out."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard

from dashboards import thresholds as t
from dashboards import variables as v
from dashboards.fleet import COUNT_BAD, LEGEND, MEMORY_STEPS
from dashboards.panels import (
    Column,
    Layout,
    bar_panel,
    board,
    query,
    stat_panel,
    steps,
    table_panel,
    timeseries_panel,
)
from dashboards.promql import (
    NOT_OVERFLOW,
    count_or_zero,
    idle_process_filter,
    num,
    sel,
    with_hostname,
)
from exporter import metrics as c

UID = "gpu-exporter-users"
H = v.HOST
U = f"{H}, {v.USER}"
USER_MEM = sel(c.USER_MEMORY, U)
USED, TOTAL = sel(c.MEMORY_USED, H), sel(c.MEMORY_TOTAL, H)
PROCESS_HIDDEN = ("Time", "__name__", "job", "uuid", "uid")
COMPLETE = (
    "Per-user numbers are complete only where the exporter sees every user's processes (host "
    "PID namespace, readable /proc); 'unknown' is memory whose owner could not be read."
)


def _users(grid: Layout) -> None:
    grid.row("Users")
    grid.add(timeseries_panel(
        "GPU memory by user", "GPU memory held by each user's processes over time, stacked. "
        + COMPLETE, "bytes", [query(f"sum by (user) ({USER_MEM})", "{{user}}")], stacked=True,
        min_val=0,
    ), 16)
    grid.add(bar_panel(
        "Share of fleet memory", "Each user's GPU memory as a share of the total memory of "
        "all selected GPUs.", "percentunit",
        query(f"sum by (user) ({USER_MEM}) / scalar(sum({TOTAL}))", "{{user}}", instant=True),
        max_val=1,
    ), 8)
    grid.add(table_panel(
        "Users", "Per user: memory held, share of the fleet, processes and GPUs in use. "
        + COMPLETE,
        [
            Column("Memory", f"sum by (user) ({USER_MEM})", "bytes"),
            Column("Share of fleet", f"sum by (user) ({USER_MEM}) / scalar(sum({TOTAL}))",
                   "percentunit"),
            Column("Processes", f"sum by (user) ({sel(c.USER_PROCESSES, U)})", "short"),
            Column("GPUs", f"count by (user) ({USER_MEM} > 0)", "short"),
        ],
        sort_by="Memory",
    ), 24, 8)


def _idle(grid: Layout) -> None:
    grid.row("Idle holders and forgotten processes")
    matchers = f"{U}"
    idle = idle_process_filter(
        matchers, t.IDLE_PROCESS_MEMORY_BYTES, t.IDLE_UTILIZATION_RATIO, t.IDLE_AVG_WINDOW
    )
    util_avg = (
        f"avg_over_time({sel(c.PROCESS_UTILIZATION, matchers, NOT_OVERFLOW)}"
        f"[{t.IDLE_AVG_WINDOW}])"
    )
    age = f"time() - {sel(c.PROCESS_START_TIME, matchers, NOT_OVERFLOW)}"
    grid.add(table_panel(
        "Idle holders", f"Processes holding over {num(t.IDLE_PROCESS_MEMORY_BYTES / t.GIB)} GiB "
        f"with under {t.IDLE_UTILIZATION_RATIO:.0%} average utilisation over "
        f"{t.IDLE_AVG_WINDOW}: forgotten notebooks, hung jobs, debuggers stopped at a "
        f"breakpoint. After {t.IDLE_FOR} the GpuProcessIdle alert fires.",
        [
            Column("Memory", f"sum without () ({idle})", "bytes"),
            Column("Avg utilisation", f"{util_avg} and ({idle})", "percentunit"),
            Column("Age", f"{age} and ({idle})", "s"),
        ],
        hidden=PROCESS_HIDDEN, sort_by="Memory",
    ), 24, 8)
    grid.add(timeseries_panel(
        "Memory held idle, by user", "GPU memory in idle-holder processes (as in the table "
        "above) per user, over time.", "bytes",
        [query(f"sum by (user) ({idle})", "{{user}}")], stacked=True, min_val=0,
    ), 12)
    long_lived = f"{age} > {num(t.LONG_LIVED_PROCESS_SECONDS)}"
    grid.add(table_panel(
        "Long-lived processes", "GPU processes running for more than "
        f"{t.LONG_LIVED_PROCESS_SECONDS // 3600} h, oldest first; with low utilisation they are "
        "usually forgotten.",
        [
            Column("Age", long_lived, "s"),
            Column("Memory", f"sum without () ({sel(c.PROCESS_MEMORY, matchers, NOT_OVERFLOW)})"
                   f" and ({long_lived})", "bytes"),
            Column("Avg utilisation", f"{util_avg} and ({long_lived})", "percentunit"),
        ],
        hidden=PROCESS_HIDDEN, sort_by="Age",
    ), 12)


def _forecast(grid: Layout) -> None:
    grid.row("Out-of-memory forecast")
    horizon = t.LEAK_HORIZON_SECONDS
    future = f"predict_linear({USED}[{t.LEAK_WINDOW}], {horizon}) / {TOTAL}"
    grid.add(timeseries_panel(
        f"Memory forecast in {horizon // 3600} h", "Memory each GPU would use "
        f"{horizon // 3600} h from now if the trend of the last {t.LEAK_WINDOW} went on, as a "
        "share of its total. Above 100 % (red) means it will run out: a leak, or a job that "
        "keeps growing its batch or cache.", "percentunit",
        [query(with_hostname(future, H), LEGEND)],
        thresholds=steps(("green", None), ("orange", t.MEMORY_USED_RATIO), ("red", 1.0)),
        min_val=0,
    ), 12)
    growing = f"({TOTAL} - {USED}) / (deriv({USED}[{t.LEAK_WINDOW}]) > 0)"
    grid.add(timeseries_panel(
        "Time until memory is full", "At the last "
        f"{t.LEAK_WINDOW}'s growth rate, how long until each growing GPU is full. Only GPUs "
        f"whose memory grows are shown; under {horizon // 3600} h for a while raises "
        "GpuMemoryExhaustionForecast.", "s", [query(with_hostname(growing, H), LEGEND)],
        thresholds=steps(("red", None), ("green", float(horizon))), min_val=0,
    ), 12)
    alert_like = (
        f"predict_linear({USED}[{t.LEAK_WINDOW}], {horizon}) > {TOTAL} "
        f"and predict_linear({USED}[{t.LEAK_RECENT_WINDOW}], {horizon}) > {TOTAL} "
        f"and delta({USED}[{t.LEAK_WINDOW}]) > {num(t.LEAK_MIN_GROWTH_RATIO)} * {TOTAL}"
    )
    grid.add(stat_panel(
        f"GPUs forecast to fill within {horizon // 3600} h", "GPUs meeting the "
        "GpuMemoryExhaustionForecast condition now (sustained growth that reaches the total "
        "within the horizon, not a one-off step).", "short",
        query(count_or_zero(alert_like)),
        thresholds=steps(*COUNT_BAD),
    ), 6, 5)
    grid.add(stat_panel(
        "Fleet memory used", "Used share of all selected GPU memory.", "percentunit",
        query(f"sum({USED}) / sum({TOTAL})"),
        thresholds=steps(*MEMORY_STEPS),
    ), 6, 5)


def build() -> dashboard.Dashboard:
    """The users and processes dashboard builder."""
    built = board(
        "GPU users and processes", UID,
        "Who holds GPU memory, who holds it idle, and when it will run out.",
        v.host_chain(v.user()), since="now-24h", refresh="1m",
    )
    grid = Layout(built)
    _users(grid)
    _idle(grid)
    _forecast(grid)
    return built
