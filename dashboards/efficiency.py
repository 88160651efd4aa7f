"""Dashboard 5: GPU efficiency - held versus used over the chosen range, who holds it idle, and
what it costs (with prices: ``dashboards/cost_panels.py``).

Range panels read the idle-accounting records (``dashboards/accounting.py``): one
``sum_over_time`` over per-minute records, never raw series over the range.
Which processes: the node dashboard's *Forgotten processes* row (one node at a time: a
fleet-wide per-process table read every process series and was the slowest query of the fleet
benchmark, docs/scale.md) and ``gpu-exporter report``.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard

from dashboards import cost_panels, panels, variables
from dashboards.promql import num, sel_record
from dashboards.variables import HOST_USER
from exporter.catalogue import records, thresholds

UID = "gpu-exporter-efficiency"
_RANGE = "[$__range]"
#: Per-minute records -> range totals in hours: GPU-hours and GiB-hours, as the report counts.
_GPU_HOURS = f" * {records.INTERVAL_SECONDS} / 3600"
_GIB_HOURS = f" * {records.INTERVAL_SECONDS} / {num(thresholds.GIB)} / 3600"
_KWH = f" * {records.INTERVAL_SECONDS} / 3600000"
USED_STEPS = panels.steps(("red", None), ("orange", 0.25), ("green", 0.6))
ACCOUNTING = (
    "From the idle-accounting recording rules (dashboards/rules/gpu-exporter-accounting.yaml), "
    "the rates of the exporter's accounting counters; a process is idle at a collection when "
    f"its SM utilisation is under {thresholds.IDLE_UTILIZATION_RATIO:.0%}. GPU time is shared "
    "between a GPU's processes by the memory they hold."
)


def _total(level: records.Level, quantity: str, matchers: str, by: str) -> str:
    """The range total of one record, summed by ``by`` (empty: everything)."""
    inner = f"sum_over_time({sel_record(level.record(quantity), matchers)}{_RANGE})"
    return f"sum by ({by}) ({inner})" if by else f"sum({inner})"


def _summary(grid: panels.Layout) -> None:
    grid.row("Held versus used over the range")
    user = records.USER
    held = _total(user, records.HELD_GPUS, HOST_USER, "")
    used = _total(user, records.USED_GPUS, HOST_USER, "")
    for title, description, unit, expr, colour_steps in (
        ("GPU-hours held", "GPU time held by processes over the range, in GPU-hours (a GPU "
         "held for a day: 24).", panels.GPU_HOURS, f"{held}{_GPU_HOURS}", None),
        ("GPU-hours used", "GPU time the processes' kernels actually ran (SM utilisation), in "
         "GPU-hours.", panels.GPU_HOURS, f"{used}{_GPU_HOURS}", None),
        ("GPU-hours held idle", "GPU time of GPUs that idled while processes held them, in "
         "GPU-hours.", panels.GPU_HOURS,
         f"{_total(user, records.IDLE_GPUS, HOST_USER, '')}{_GPU_HOURS}", None),
        ("Used / held", "Share of the GPU time held that was used.", "percentunit",
         f"{used} / {held}", USED_STEPS),
        ("GiB-hours held idle", "Memory held by idle processes over the range, in GiB-hours.",
         "short", f"{_total(user, records.IDLE_MEMORY, HOST_USER, '')}{_GIB_HOURS}", None),
        ("Energy (kWh)", "Energy of the GPUs, attributed to their users.", "short",
         f"{_total(user, records.POWER, HOST_USER, '')}{_KWH}", None),
    ):
        grid.add(panels.stat_panel(title, f"{description} {ACCOUNTING}", unit, panels.query(expr),
                                   thresholds=colour_steps), 4, 4)


def _by(grid: panels.Layout, title: str, level: records.Level, matchers: str, by: str, *,
        energy: bool) -> None:
    held = _total(level, records.HELD_GPUS, matchers, by)
    used = _total(level, records.USED_GPUS, matchers, by)
    idle = _total(level, records.IDLE_GPUS, matchers, by)
    idle_memory = _total(level, records.IDLE_MEMORY, matchers, by)
    columns = [
        panels.Column("Idle GPU-hours", f"{idle}{_GPU_HOURS}", panels.GPU_HOURS),
        panels.Column("Held GPU-hours", f"{held}{_GPU_HOURS}", panels.GPU_HOURS),
        panels.Column("Used GPU-hours", f"{used}{_GPU_HOURS}", panels.GPU_HOURS),
        panels.Column("Used / held", f"{used} / {held}", "percentunit", USED_STEPS),
        panels.Column("Idle GiB-hours", f"{idle_memory}{_GIB_HOURS}", "short"),
    ]
    if energy:
        energy_total = _total(level, records.POWER, matchers, by)
        columns.append(panels.Column("kWh", f"{energy_total}{_KWH}", "short"))
    grid.add(panels.table_panel(
        title, "GPU-hours held idle, held and used over the range, and memory held idle "
        "(GiB-hours), as gpu-exporter report counts them. " + ACCOUNTING, columns,
        sort_by="Idle GPU-hours",
    ), 12, 8)


def _tables(grid: panels.Layout) -> None:
    grid.row("Who holds GPUs idle")
    _by(grid, "Per user", records.USER, HOST_USER, "user", energy=True)
    _by(grid, "Per namespace and pod", records.POD, variables.HOST, "namespace, pod", energy=False)
    for title, description, unit, quantity in (
        ("GPUs held idle, by user", "GPUs (memory shares of idle GPUs) held by each user's idle "
         "processes, minute by minute. ", "short", records.IDLE_GPUS),
        ("Memory held idle, by user", "GPU memory held by each user's idle processes, minute by "
         "minute. ", "bytes", records.IDLE_MEMORY),
    ):
        per_user = sel_record(records.USER.record(quantity), HOST_USER)
        grid.add(panels.timeseries_panel(
            title, description + ACCOUNTING, unit,
            [panels.query(f"sum by (user) ({per_user})", "{{user}}")], stacked=True, min_val=0,
        ), 12)


def build() -> dashboard.Dashboard:
    """The efficiency dashboard builder."""
    built = panels.board(
        "GPU efficiency", UID,
        "GPU time and memory held versus used over the chosen range, who holds GPUs idle, and "
        "forgotten processes.",
        variables.host_chain(variables.user()), since="now-7d", refresh="5m",
    )
    grid = panels.Layout(built)
    _summary(grid)
    _tables(grid)
    cost_panels.add_row(grid)
    return built
