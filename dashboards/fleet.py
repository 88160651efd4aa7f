"""Dashboard 1: the GPU fleet at a glance - how full, how busy, how hot, and who holds memory."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard

from dashboards import thresholds as t
from dashboards import variables as v
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
from dashboards.promql import count_or_zero, num, sel, with_hostname
from exporter import metrics as c

UID = "gpu-exporter-fleet"
H = v.HOST
USED, TOTAL = sel(c.MEMORY_USED, H), sel(c.MEMORY_TOTAL, H)
UTIL = sel(c.UTILIZATION, H)

MEMORY_STEPS = (("green", None), ("orange", t.MEMORY_AMBER_RATIO), ("red", t.MEMORY_USED_RATIO))
TEMPERATURE_STEPS = (
    ("green", None),
    ("orange", t.TEMPERATURE_WARNING_CELSIUS),
    ("red", t.TEMPERATURE_CRITICAL_CELSIUS),
)
COUNT_BAD = (("green", None), ("red", 1.0))
COUNT_WARN = (("green", None), ("orange", 1.0))
LEGEND = "{{hostname}} GPU {{gpu}}"


def _idle_gpus() -> str:
    return (
        f"{USED} / {TOTAL} > {num(t.IDLE_GPU_MEMORY_RATIO)} "
        f"and avg_over_time({UTIL}[{t.IDLE_AVG_WINDOW}]) < {num(t.IDLE_UTILIZATION_RATIO)}"
    )


def _summary(grid: Layout) -> None:
    grid.row("Fleet")
    grid.add(stat_panel(
        "GPUs", "Number of GPUs the selected exporters report (answering or not).", "short",
        query(f"count({sel(c.GPU_UP, H)})"),
    ), 3, 4)
    grid.add(stat_panel(
        "GPUs down", "GPUs that did not answer the last collection (gpu_up = 0): lost, in need "
        "of a reset, or hung. The other GPUs of the host still report.", "short",
        query(count_or_zero(f"{sel(c.GPU_UP, H)} == 0")), thresholds=steps(*COUNT_BAD),
    ), 3, 4)
    grid.add(stat_panel(
        "Memory used", "GPU memory in use across the selected GPUs (what nvidia-smi shows as "
        "used: every process's CUDA context, framework caches and tensors).", "bytes",
        query(f"sum({USED})"),
    ), 3, 4)
    grid.add(stat_panel(
        "Memory total", "Total GPU memory of the selected GPUs.", "bytes",
        query(f"sum({TOTAL})"),
    ), 3, 4)
    grid.add(stat_panel(
        "Fleet memory used", f"Used share of all selected GPU memory. Turns red at "
        f"{t.MEMORY_USED_RATIO:.0%}, the per-GPU alert threshold.", "percentunit",
        query(f"sum({USED}) / sum({TOTAL})"), thresholds=steps(*MEMORY_STEPS),
    ), 3, 4)
    grid.add(stat_panel(
        f"GPUs above {t.MEMORY_USED_RATIO:.0%} memory", "GPUs whose memory is almost full: "
        "new allocations there fail with CUDA out-of-memory errors (alert GpuMemoryAlmostFull).",
        "short", query(count_or_zero(f"{USED} / {TOTAL} > {num(t.MEMORY_USED_RATIO)}")),
        thresholds=steps(*COUNT_BAD),
    ), 3, 4)
    grid.add(stat_panel(
        "GPUs holding memory while idle", f"GPUs with over {t.IDLE_GPU_MEMORY_RATIO:.0%} of "
        f"their memory used but under {t.IDLE_UTILIZATION_RATIO:.0%} average utilisation over "
        f"{t.IDLE_AVG_WINDOW}: usually a forgotten notebook or a hung job (alert "
        "GpuMemoryHeldIdle after 1h). See the users dashboard for who.", "short",
        query(count_or_zero(_idle_gpus())), thresholds=steps(*COUNT_WARN),
    ), 3, 4)
    grid.add(stat_panel(
        "Average utilisation", "Mean GPU utilisation: the share of time a kernel was running, "
        "averaged over GPUs. It says nothing about how many SMs were busy.", "percentunit",
        query(f"avg({UTIL})"),
    ), 3, 4)


def _per_gpu(grid: Layout) -> None:
    grid.row("Per node and GPU")
    grid.add(timeseries_panel(
        "Memory used per GPU", "Used / total memory of each GPU. The dashed line is the "
        f"{t.MEMORY_USED_RATIO:.0%} alert threshold; a line climbing steadily towards 100 % is a "
        "leak (see the forecast on the users dashboard).", "percentunit",
        [query(with_hostname(f"{USED} / {TOTAL}", H), LEGEND)],
        thresholds=steps(*MEMORY_STEPS), min_val=0, max_val=1,
    ), 12)
    grid.add(timeseries_panel(
        "Utilisation per GPU", "Share of time at least one kernel ran. High memory with "
        "utilisation near 0 means the job holding the GPU is not really running.",
        "percentunit", [query(with_hostname(UTIL, H), LEGEND)], min_val=0, max_val=1,
    ), 12)
    grid.add(timeseries_panel(
        "Memory used per node", "GPU memory in use, summed per node (stacked).", "bytes",
        [query(f"sum by (hostname) ({with_hostname(USED, H)})", "{{hostname}}")], stacked=True,
    ), 12)
    grid.add(bar_panel(
        "Top users by GPU memory", "Users holding the most GPU memory across the selected "
        "nodes. Complete only where the exporter sees every user's processes (host PID "
        "namespace); 'unknown' is memory whose owner could not be read.", "bytes",
        query(f"topk(10, sum by (user) ({sel(c.USER_MEMORY, H)}))", "{{user}}", instant=True),
    ), 12)
    grid.add(timeseries_panel(
        "Temperature per GPU", f"Core temperature. Above {num(t.TEMPERATURE_WARNING_CELSIUS)} "
        f"°C check the cooling; above {num(t.TEMPERATURE_CRITICAL_CELSIUS)} °C the GPU "
        "throttles hard (dashed lines: alert thresholds).", "celsius",
        [query(with_hostname(sel(c.TEMPERATURE, H), H), LEGEND)],
        thresholds=steps(*TEMPERATURE_STEPS),
    ), 12)
    grid.add(timeseries_panel(
        "Power per GPU", "Board power draw. Power that never rises while a job runs hints at a "
        "CPU or input-pipeline bottleneck: the GPU waits for data.", "watt",
        [query(with_hostname(sel(c.POWER_USAGE, H), H), LEGEND)], min_val=0,
    ), 12)


def _nodes(grid: Layout) -> None:
    grid.row("Nodes")

    def per_node(aggregation: str, expr: str) -> str:
        return f"{aggregation} by (hostname) ({with_hostname(expr, H)})"

    grid.add(table_panel(
        "Nodes", "One row per node: GPUs, memory, utilisation, hottest GPU and power. Sort by "
        "any column; memory share turns red at the alert threshold.",
        [
            Column("GPUs", per_node("count", sel(c.GPU_UP, H)), "short"),
            Column("GPUs up", per_node("sum", sel(c.GPU_UP, H)), "short"),
            Column("Memory used", per_node("sum", USED), "bytes"),
            Column("Memory total", per_node("sum", TOTAL), "bytes"),
            Column(
                "Memory used %", f"{per_node('sum', USED)} / {per_node('sum', TOTAL)}",
                "percentunit", steps(*MEMORY_STEPS),
            ),
            Column("Avg utilisation", per_node("avg", UTIL), "percentunit"),
            Column(
                "Max temperature", per_node("max", sel(c.TEMPERATURE, H)), "celsius",
                steps(*TEMPERATURE_STEPS),
            ),
            Column("Power", per_node("sum", sel(c.POWER_USAGE, H)), "watt"),
        ],
        sort_by="Memory used %",
    ), 24, 9)


def build() -> dashboard.Dashboard:
    """The fleet overview dashboard builder."""
    built = board(
        "GPU fleet overview", UID,
        "Every GPU at a glance: memory, utilisation, temperature, power, top users.",
        v.host_chain(),
    )
    grid = Layout(built)
    _summary(grid)
    _per_gpu(grid)
    _nodes(grid)
    return built
