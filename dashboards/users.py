"""Dashboard 3: users and processes - who holds memory, who holds it idle, and when it runs out."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard

from dashboards import alerts, panels, recording, variables
from dashboards.fleet import COUNT_BAD, NODE_LEGEND, memory_steps
from dashboards.promql import (
    count_or_zero,
    num,
    sel,
    sel_record,
    with_hostname,
)
from dashboards.variables import HOST_USER
from exporter.catalogue import metrics, thresholds

UID = "gpu-exporter-users"
# Fleet-wide views read per-(host, user) and per-host records: one series per user and node.
USER_MEM = sel_record(recording.INSTANCE_USER_MEMORY, HOST_USER)
TOTAL = sel_record(recording.INSTANCE_MEMORY_TOTAL, variables.HOST)
COMPLETE = (
    "Per-user numbers are complete only where the exporter sees every user's processes (host "
    "PID namespace, readable /proc); 'unknown' is memory whose owner could not be read."
)


def _users(grid: panels.Layout) -> None:
    grid.row("Users")
    grid.add(panels.timeseries_panel(
        "GPU memory by user", "GPU memory held by each user's processes over time, stacked. "
        + COMPLETE, "bytes",
        [panels.query(f"sum by (user) ({USER_MEM})", "{{user}}")],
        stacked=True,
        min_val=0,
    ), 16)
    grid.add(panels.bar_panel(
        "Share of fleet memory", "Each user's GPU memory as a share of the total memory of "
        "all selected GPUs.", "percentunit",
        panels.query(f"sum by (user) ({USER_MEM}) / scalar(sum({TOTAL}))", "{{user}}",
                     instant=True),
        max_val=1,
    ), 8)
    grid.add(panels.table_panel(
        "Users", "Per user: memory held, share of the fleet, processes and GPUs in use. "
        + COMPLETE,
        [
            panels.Column("Memory", f"sum by (user) ({USER_MEM})", "bytes"),
            panels.Column("Share of fleet", f"sum by (user) ({USER_MEM}) / scalar(sum({TOTAL}))",
                   "percentunit"),
            # Per (GPU, user) on purpose: records of these would cost every rule evaluation
            # ~250 ms at 100 nodes to save one instant query of ~50 ms (docs/scale.md).
            panels.Column("Processes",
                          f"sum by (user) ({sel(metrics.USER_PROCESSES, HOST_USER)})", "short"),
            panels.Column("GPUs", f"count by (user) ({sel(metrics.USER_MEMORY, HOST_USER)} > 0)",
                          "short"),
        ],
        sort_by="Memory",
    ), 24, 8)


def _idle(grid: panels.Layout) -> None:
    grid.row("Idle holders and forgotten processes")
    # Per user and host, from the gpu-idle-users group's recording rules: one series per user and
    # node however many processes, so the panels stay cheap on a large fleet.
    idle = sel_record(alerts.IDLE_MEMORY, HOST_USER)
    held_idle = f"{idle} > 0"
    grid.add(panels.table_panel(
        "Idle memory by node and user", "Per node and user: GPU memory held by processes over "
        f"{num(thresholds.IDLE_PROCESS_MEMORY_BYTES / thresholds.GIB)} GiB whose utilisation "
        f"stayed under {thresholds.IDLE_UTILIZATION_RATIO:.0%} for {thresholds.IDLE_AVG_WINDOW} "
        "(forgotten notebooks, hung jobs, debuggers stopped at a breakpoint), the user's memory "
        f"there and their busiest process now. After {thresholds.IDLE_FOR} GpuProcessIdle fires, "
        "once per user for all nodes. Which processes: the node dashboard's Idle processes and "
        "Processes (sort by age) tables, or gpu-exporter report for the history; per-process "
        "tables across the whole fleet are left out on purpose (docs/scale.md).",
        [
            panels.Column("Idle memory", with_hostname(held_idle, variables.HOST), "bytes"),
            panels.Column("User's memory", with_hostname(
                f"{sel_record(recording.INSTANCE_USER_MEMORY, HOST_USER)} and on (job, instance, "
                "user) "
                f"({held_idle})", variables.HOST), "bytes"),
            panels.Column("Busiest process", with_hostname(
                f"{sel_record(alerts.USER_UTILIZATION_MAX, HOST_USER)} and on (job, instance, "
                "user) "
                f"({held_idle})", variables.HOST), "percentunit"),
        ],
        hidden=("Time", "__name__", "job", "instance"), sort_by="Idle memory",
    ), 24, 8)
    grid.add(panels.timeseries_panel(
        "Memory held idle, by user", "GPU memory in idle processes (as in the table above) per "
        "user, over time.", "bytes",
        [panels.query(f"sum by (user) ({idle})", "{{user}}")], stacked=True, min_val=0,
    ), 12)


def _forecast(grid: panels.Layout) -> None:
    grid.row("Out-of-memory forecast")
    horizon = thresholds.LEAK_HORIZON_SECONDS
    # The trend is recorded per GPU by the gpu-memory group; the graphs show each node's worst
    # GPU: one series per node (a fleet of 8-GPU nodes would otherwise draw, and join the host
    # name to, eight per node at every step). The node dashboard has every GPU.
    future = f"max by (job, instance) ({sel_record(alerts.MEMORY_FORECAST, variables.HOST)})"
    grid.add(panels.timeseries_panel(
        f"Memory forecast in {horizon // 3600} h", "Memory the fullest-to-be GPU of each node "
        f"would use {horizon // 3600} h from now if the trend of the last "
        f"{thresholds.LEAK_WINDOW} went on, as a share of its total. Above 100 % (red) means it "
        "will run out: a leak, or a job that keeps growing its batch or cache.", "percentunit",
        [panels.query(with_hostname(future, variables.HOST), NODE_LEGEND)],
        thresholds=panels.steps(("green", None), ("orange", thresholds.MEMORY_USED_RATIO),
                                ("red", 1.0)),
        min_val=0,
    ), 12)
    growing = (f"min by (job, instance) "
               f"({sel_record(alerts.TIME_TO_FULL, variables.HOST)} > 0)")
    grid.add(panels.timeseries_panel(
        "Time until memory is full", "At the last "
        f"{thresholds.LEAK_WINDOW}'s growth rate, how long until the first growing GPU of each "
        f"node is full. Only nodes with a GPU whose memory grows are shown; under "
        f"{horizon // 3600} h for a while raises GpuMemoryExhaustionForecast.", "s",
        [panels.query(with_hostname(growing, variables.HOST), NODE_LEGEND)],
        thresholds=panels.steps(("red", None), ("green", float(horizon))), min_val=0,
    ), 12)
    # Pending or firing: exactly the GPUs meeting the alert's condition now.
    meeting = f'ALERTS{{alertname="GpuMemoryExhaustionForecast", {variables.HOST}}}'
    grid.add(panels.stat_panel(
        f"GPUs forecast to fill within {horizon // 3600} h", "GPUs meeting the "
        "GpuMemoryExhaustionForecast condition now (sustained growth that reaches the total "
        "within the horizon, not a one-off step): its pending and firing alerts.", "short",
        panels.query(count_or_zero(meeting)),
        thresholds=panels.steps(*COUNT_BAD),
    ), 6, 5)
    grid.add(panels.stat_panel(
        "Fleet memory used", "Used share of all selected GPU memory.", "percentunit",
        panels.query(f"sum({sel_record(recording.INSTANCE_MEMORY_USED, variables.HOST)}) / "
              f"sum({sel_record(recording.INSTANCE_MEMORY_TOTAL, variables.HOST)})"),
        thresholds=panels.steps(*memory_steps()),
    ), 6, 5)


def build() -> dashboard.Dashboard:
    """The users and processes dashboard builder."""
    built = panels.board(
        "GPU users and processes", UID,
        "Who holds GPU memory, who holds it idle, and when it will run out.",
        variables.host_chain(variables.user()), since="now-24h", refresh="1m",
    )
    grid = panels.Layout(built)
    _users(grid)
    _idle(grid)
    _forecast(grid)
    return built
