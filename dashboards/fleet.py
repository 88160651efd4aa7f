"""Dashboard 1: the GPU fleet at a glance - how full, how busy, how hot, and who holds memory.

Every panel reads recording rules (per node or per GPU, never per process), so the dashboard
costs the same whatever runs on the GPUs, and one series per node over long ranges.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard, prometheus, timeseries

from dashboards import alerts, panels, recording, variables
from dashboards.promql import count_or_zero, num, sel_record, with_hostname
from exporter.catalogue import thresholds

UID = "gpu-exporter-fleet"

def memory_steps() -> tuple[panels.Step, ...]:
    """Memory colours: amber before, red from the alert threshold (read when a board builds:
    a site's settings may move it)."""
    return (("green", None), ("orange", thresholds.MEMORY_AMBER_RATIO),
            ("red", thresholds.MEMORY_USED_RATIO))


def temperature_steps() -> tuple[panels.Step, ...]:
    """Temperature colours at the two alert thresholds."""
    return (("green", None), ("orange", thresholds.TEMPERATURE_WARNING_CELSIUS),
            ("red", thresholds.TEMPERATURE_CRITICAL_CELSIUS))


COUNT_BAD = (("green", None), ("red", 1.0))
COUNT_WARN = (("green", None), ("orange", 1.0))
NODE_LEGEND = "{{hostname}}"


def temperature_graph(title: str, description: str,
                      target: prometheus.Dataquery) -> timeseries.Panel:
    """Temperatures over time, the alert thresholds drawn as dashed lines."""
    return panels.timeseries_panel(title, description, "celsius", [target],
                                   thresholds=panels.steps(*temperature_steps()))


def _rec(record: str) -> str:
    """A per-instance or per-GPU recording rule's series on the selected targets."""
    return sel_record(record, variables.HOST)


def _by_node(record: str) -> str:
    """A per-instance recording rule's series, labelled with the node's host name."""
    return with_hostname(_rec(record), variables.HOST)


def _idle_gpus() -> str:
    return (
        f"{_rec(recording.GPU_MEMORY_RATIO)} > {num(thresholds.IDLE_GPU_MEMORY_RATIO)} "
        f"and {_rec(alerts.GPU_ACTIVITY_AVG)} < {num(thresholds.IDLE_UTILIZATION_RATIO)}"
    )


def _summary(grid: panels.Layout) -> None:
    grid.row("Fleet")
    gpus, gpus_up = _rec(recording.INSTANCE_GPUS), _rec(recording.INSTANCE_GPUS_UP)
    used = f"sum({_rec(recording.INSTANCE_MEMORY_USED)})"
    total = f"sum({_rec(recording.INSTANCE_MEMORY_TOTAL)})"
    grid.add(panels.stat_panel(
        "GPUs", "Number of GPUs the selected exporters report (answering or not).", "short",
        panels.query(f"sum({gpus})"),
    ), 3, 4)
    grid.add(panels.stat_panel(
        "GPUs down", "GPUs that did not answer the last collection (gpu_up = 0): lost, in need "
        "of a reset, or hung. The other GPUs of the host still report.", "short",
        panels.query(f"sum({gpus}) - sum({gpus_up})"), thresholds=panels.steps(*COUNT_BAD),
    ), 3, 4)
    grid.add(panels.stat_panel(
        "Memory used", "GPU memory in use across the selected GPUs (what nvidia-smi shows as "
        "used: every process's CUDA context, framework caches and tensors).", "bytes",
        panels.query(used),
    ), 3, 4)
    grid.add(panels.stat_panel(
        "Memory total", "Total GPU memory of the selected GPUs.", "bytes", panels.query(total),
    ), 3, 4)
    grid.add(panels.stat_panel(
        "Fleet memory used", f"Used share of all selected GPU memory. Turns red at "
        f"{thresholds.MEMORY_USED_RATIO:.0%}, the per-GPU alert threshold.", "percentunit",
        panels.query(f"{used} / {total}"), thresholds=panels.steps(*memory_steps()),
    ), 3, 4)
    grid.add(panels.stat_panel(
        f"GPUs above {thresholds.MEMORY_USED_RATIO:.0%} memory",
        "GPUs whose memory is almost full: new allocations there fail with CUDA out-of-memory "
        "errors (alert GpuMemoryAlmostFull).",
        "short",
        panels.query(count_or_zero(
            f"{_rec(recording.GPU_MEMORY_RATIO)} > {num(thresholds.MEMORY_USED_RATIO)}")),
        thresholds=panels.steps(*COUNT_BAD),
    ), 3, 4)
    grid.add(panels.stat_panel(
        "GPUs holding memory while idle",
        f"GPUs with over {thresholds.IDLE_GPU_MEMORY_RATIO:.0%} of their memory used but under "
        f"{thresholds.IDLE_UTILIZATION_RATIO:.0%} average activity (SM activity where the GPU "
        "reports it, else utilisation) over "
        f"{thresholds.IDLE_AVG_WINDOW}: usually a forgotten notebook or a hung job (alert "
        "GpuMemoryHeldIdle after 1h). See the users dashboard for who.", "short",
        panels.query(count_or_zero(_idle_gpus())), thresholds=panels.steps(*COUNT_WARN),
    ), 3, 4)
    grid.add(panels.stat_panel(
        "Average utilisation", "Mean GPU utilisation: the share of time a kernel was running, "
        "averaged over the GPUs that answer (GPUs in MIG mode report none). It says nothing "
        "about how many SMs were busy.",
        "percentunit",
        panels.query(f"sum({_rec(recording.INSTANCE_UTILIZATION)} * {gpus_up}) / sum({gpus_up})"),
    ), 3, 4)


def _per_node(grid: panels.Layout) -> None:
    grid.row("Per node")
    grid.add(panels.timeseries_panel(
        "Memory used per node", "Used / total GPU memory of each node. The dashed line is the "
        f"{thresholds.MEMORY_USED_RATIO:.0%} per-GPU alert threshold; the node dashboard shows "
        "each GPU (a line climbing steadily towards 100 % is a leak).", "percentunit",
        [panels.query(_by_node(recording.INSTANCE_MEMORY_RATIO), NODE_LEGEND)],
        thresholds=panels.steps(*memory_steps()), min_val=0, max_val=1,
    ), 12)
    grid.add(panels.timeseries_panel(
        "Utilisation and SM activity per node", "Utilisation: share of time at least one kernel "
        "ran; SM activity (GPUs with GPM, Hopper and newer): share of the SMs that were busy; "
        "both averaged over each node's GPUs. High memory with both near 0 means the jobs "
        "holding the GPUs are not really running; utilisation far above SM activity means the "
        "kernels are too small to fill the GPU.", "percentunit",
        [panels.query(_by_node(recording.INSTANCE_UTILIZATION), f"{NODE_LEGEND} utilisation"),
         panels.query(_by_node(recording.INSTANCE_SM_ACTIVE), f"{NODE_LEGEND} SM activity")],
        min_val=0, max_val=1,
    ), 12)
    grid.add(panels.timeseries_panel(
        "Memory used per node, stacked", "GPU memory in use, summed per node (stacked).",
        "bytes", [panels.query(_by_node(recording.INSTANCE_MEMORY_USED), NODE_LEGEND)],
        stacked=True,
    ), 12)
    grid.add(panels.bar_panel(
        "Top users by GPU memory", "Users holding the most GPU memory across the selected "
        "nodes. Complete only where the exporter sees every user's processes (host PID "
        "namespace); 'unknown' is memory whose owner could not be read.", "bytes",
        panels.query(f"topk(10, sum by (user) ({_rec(recording.INSTANCE_USER_MEMORY)}))",
                     "{{user}}", instant=True),
    ), 12)
    grid.add(temperature_graph(
        "Hottest GPU per node", "Core temperature of each node's hottest GPU. Above "
        f"{num(thresholds.TEMPERATURE_WARNING_CELSIUS)} °C check the cooling; above "
        f"{num(thresholds.TEMPERATURE_CRITICAL_CELSIUS)} °C the GPU throttles hard (dashed lines: "
        "alert thresholds).", panels.query(_by_node(recording.INSTANCE_TEMPERATURE), NODE_LEGEND),
    ), 12)
    grid.add(panels.timeseries_panel(
        "Power per node", "Board power draw summed per node. Power that never rises while a job "
        "runs hints at a CPU or input-pipeline bottleneck: the GPU waits for data.", "watt",
        [panels.query(_by_node(recording.INSTANCE_POWER), NODE_LEGEND)], min_val=0,
    ), 12)


def _nodes(grid: panels.Layout) -> None:
    grid.row("Nodes")
    grid.add(panels.table_panel(
        "Nodes", "One row per node: GPUs, memory, utilisation, hottest GPU and power. Sort by "
        "any column; memory share turns red at the alert threshold.",
        [
            panels.Column("GPUs", _by_node(recording.INSTANCE_GPUS), "short"),
            panels.Column("GPUs up", _by_node(recording.INSTANCE_GPUS_UP), "short"),
            panels.Column("Memory used", _by_node(recording.INSTANCE_MEMORY_USED), "bytes"),
            panels.Column("Memory total", _by_node(recording.INSTANCE_MEMORY_TOTAL), "bytes"),
            panels.Column("Memory used %", _by_node(recording.INSTANCE_MEMORY_RATIO), "percentunit",
                   panels.steps(*memory_steps())),
            panels.Column("Avg utilisation", _by_node(recording.INSTANCE_UTILIZATION),
                          "percentunit"),
            panels.Column("Max temperature", _by_node(recording.INSTANCE_TEMPERATURE), "celsius",
                   panels.steps(*temperature_steps())),
            panels.Column("Power", _by_node(recording.INSTANCE_POWER), "watt"),
        ],
        hidden=("Time", "__name__", "job", "instance"),
        sort_by="Memory used %",
    ), 24, 9)


def build() -> dashboard.Dashboard:
    """The fleet overview dashboard builder."""
    built = panels.board(
        "GPU fleet overview", UID,
        "Every GPU at a glance: memory, utilisation, temperature, power, top users.",
        variables.host_chain(),
    )
    grid = panels.Layout(built)
    _summary(grid)
    _per_node(grid)
    _nodes(grid)
    return built
