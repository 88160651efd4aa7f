"""Dashboard 2: one node and its GPUs - memory, load, heat, power, clocks, every process and,
for processes that publish them, PyTorch's allocator figures."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard, prometheus

from dashboards import panels, variables
from dashboards.activity_panels import node_activity_rows
from dashboards.fleet import memory_steps, temperature_graph, temperature_steps
from dashboards.gpu_health_panels import GPU_LEGEND, node_health_rows, node_mig_rows
from dashboards.nvlink_panels import node_nvlink_rows
from dashboards.promql import NOT_OVERFLOW, idle_process_filter, num, seconds, sel
from exporter.catalogue import metrics, records, thresholds
from exporter.catalogue.metrics import allocator

UID = "gpu-exporter-node"
HOST_GPU = f"{variables.HOST}, {variables.GPU}"
USED, TOTAL = sel(metrics.MEMORY_USED, HOST_GPU), sel(metrics.MEMORY_TOTAL, HOST_GPU)
PROCESS_LEGEND = "GPU {{gpu}} {{process}} ({{pid}}, {{user}})"
#: Lines in the per-process graphs: the processes with the most memory (or utilisation) at each
#: moment; a node with hundreds of processes would otherwise draw hundreds of lines.
TOP_PROCESSES = 10
#: The throttle-time reasons that mean a working GPU was slowed (not idle, not the totals).
SLOWING = 'reason!~"low_utilization|below_application_clocks|below_base_clocks"'
#: Rows in the forgotten-process tables.
TOP_TABLE = 20
NVML_GAP = (
    "The driver's number is larger than PyTorch's torch.cuda.memory_allocated(): it also counts "
    "the CUDA context (a few hundred MiB per process and GPU) and the caching allocator's "
    "reserve (torch.cuda.memory_reserved()); freed tensors stay reserved until "
    "torch.cuda.empty_cache()."
)


def _on_gpus(metric: metrics.Metric) -> str:
    """A metric's series on the selected host's selected GPUs."""
    return sel(metric, HOST_GPU)


def _top_processes(metric: metrics.Metric) -> prometheus.Dataquery:
    """A per-process metric of the TOP_PROCESSES processes with the highest value at each
    moment, on the selected GPUs."""
    return panels.query(f"topk({TOP_PROCESSES}, {_on_gpus(metric)})", PROCESS_LEGEND)


def _device(grid: panels.Layout) -> None:
    grid.row("Device")
    grid.add(panels.stat_panel(
        "Memory used", "Used share of each GPU's memory; red from the "
        f"{thresholds.MEMORY_USED_RATIO:.0%} alert threshold.", "percentunit",
        panels.query(f"{USED} / {TOTAL}", GPU_LEGEND), thresholds=panels.steps(*memory_steps()),
    ), 6, 5)
    grid.add(panels.stat_panel(
        "Temperature", "Current core temperature per GPU (orange from "
        f"{thresholds.TEMPERATURE_WARNING_CELSIUS:.0f} °C, red from "
        f"{thresholds.TEMPERATURE_CRITICAL_CELSIUS:.0f} "
        "°C: the alert thresholds).", "celsius",
        panels.query(_on_gpus(metrics.TEMPERATURE), GPU_LEGEND),
        thresholds=panels.steps(*temperature_steps()),
    ), 6, 5)
    grid.add(panels.table_panel(
        "GPUs", "Model, PCI bus id and driver of each GPU (from gpu_info), with its memory.",
        [panels.Column("Memory total", f"sum without () ({TOTAL}) * on (job, instance, uuid) "
                f"group_left (name, pci_bus_id, driver_version) {_on_gpus(metrics.GPU_INFO)}",
                "bytes")],
        hidden=("Time", "__name__", "job", "instance"),
    ), 12, 5)
    grid.add(panels.timeseries_panel(
        "Memory used vs total", "Memory allocated on the device (what nvidia-smi shows) "
        "against its total. " + NVML_GAP, "bytes",
        [panels.query(USED, f"{GPU_LEGEND} used"),
         panels.query(TOTAL, f"{GPU_LEGEND} total", ref="B")], min_val=0,
    ), 12)
    grid.add(panels.timeseries_panel(
        "Utilisation", "GPU: share of time a kernel ran. Memory: share of time device memory "
        "was read or written (bandwidth, not capacity). Memory held with utilisation near 0 "
        "means the job is not really running.", "percentunit",
        [panels.query(_on_gpus(metrics.UTILIZATION), f"{GPU_LEGEND} GPU"),
         panels.query(_on_gpus(metrics.MEMORY_UTILIZATION), f"{GPU_LEGEND} memory", ref="B")],
        min_val=0, max_val=1,
    ), 12)
    grid.add(temperature_graph(
        "Temperature", "Core temperature; dashed lines at "
        f"{thresholds.TEMPERATURE_WARNING_CELSIUS:.0f} °C (watch the cooling) and "
        f"{thresholds.TEMPERATURE_CRITICAL_CELSIUS:.0f} °C.",
        panels.query(_on_gpus(metrics.TEMPERATURE), GPU_LEGEND),
    ), 12)
    grid.add(panels.timeseries_panel(
        "Power vs limit", "Board power against the enforced limit. Power that stays low while "
        "processes hold the GPU points to a CPU or input-pipeline bottleneck.", "watt",
        [panels.query(_on_gpus(metrics.POWER_USAGE), f"{GPU_LEGEND} draw"),
         panels.query(_on_gpus(metrics.POWER_LIMIT), f"{GPU_LEGEND} limit", ref="B")], min_val=0,
    ), 12)
    grid.add(panels.timeseries_panel(
        "Clocks", "SM, graphics and memory clocks. Clocks dropping under load while a throttle "
        "reason is active mean the GPU runs slower than it could.", "hertz",
        [panels.query(_on_gpus(metrics.SM_CLOCK), f"{GPU_LEGEND} SM"),
         panels.query(_on_gpus(metrics.GRAPHICS_CLOCK), f"{GPU_LEGEND} graphics", ref="B"),
         panels.query(_on_gpus(metrics.MEMORY_CLOCK), f"{GPU_LEGEND} memory", ref="C")], min_val=0,
    ), 12)
    grid.add(panels.timeseries_panel(
        "Throttle reasons active", "Clock event reasons while active (1). gpu_idle is harmless; "
        "sw/hw thermal slowdown means too hot, sw_power_cap means at the power limit, "
        "hw_slowdown or power brake point to power delivery.", "short",
        [panels.query(f"{_on_gpus(metrics.THROTTLE_ACTIVE)} > 0", f"{GPU_LEGEND} {{{{reason}}}}")],
        min_val=0, max_val=1,
    ), 12)
    grid.add(panels.timeseries_panel(
        "Throttle time", "Share of each interval the clocks were held back, per reason, from "
        "the driver's counters (--collector.throttle_time): unlike the reasons active above, "
        "short events between two scrapes count too. low_utilization (an idle GPU) and the "
        "below-clocks totals are left out.", "percentunit",
        [panels.query(f"rate({sel(metrics.THROTTLE_TIME, HOST_GPU, SLOWING)}"
                      f"[$__rate_interval]) > 0", f"{GPU_LEGEND} {{{{reason}}}}")],
        min_val=0, max_val=1,
    ), 12)
    grid.add(panels.timeseries_panel(
        "ECC errors", "New ECC errors per interval. Corrected ones are harmless in small "
        "numbers; any uncorrected error means data loss: drain and reset the GPU.", "short",
        [panels.query(f"increase({_on_gpus(metrics.ECC_ERRORS)}[$__rate_interval])",
                      f"{GPU_LEGEND} {{{{type}}}}")],
        min_val=0,
    ), 12)
    grid.add(panels.timeseries_panel(
        "Performance state", "P-state: 0 is maximum performance, an idle GPU sits at P8 or "
        "higher numbers.", "short", [panels.query(_on_gpus(metrics.PERFORMANCE_STATE), GPU_LEGEND)],
        min_val=0,
    ), 12)


def _processes(grid: panels.Layout) -> None:
    grid.row("Processes")
    proc = f"{HOST_GPU}, {NOT_OVERFLOW}"
    grid.add(panels.table_panel(
        "Processes", "Every process holding a context on the selected GPUs, like gpustat: "
        "pid, user, name, memory, utilisation and age. " + NVML_GAP + " Rows named "
        f"{metrics.OVERFLOW_VALUE} sum processes beyond the exporter's per-GPU series cap.",
        [
            panels.Column("Memory", f"sum without () ({_on_gpus(metrics.PROCESS_MEMORY)})",
                          "bytes"),
            panels.Column("Utilisation",
                          f"sum without () ({_on_gpus(metrics.PROCESS_UTILIZATION)})",
                          "percentunit"),
            panels.Column("Age", f"time() - {sel(metrics.PROCESS_START_TIME, proc)}", "s"),
        ],
        hidden=("Time", "__name__", "job", "instance", "uuid"),
        sort_by="Memory",
    ), 24, 9)
    idle = idle_process_filter(
        HOST_GPU, thresholds.IDLE_PROCESS_MEMORY_BYTES, thresholds.IDLE_UTILIZATION_RATIO,
        thresholds.IDLE_AVG_WINDOW,
    )
    grid.add(panels.table_panel(
        "Idle processes", "Processes holding over "
        f"{num(thresholds.IDLE_PROCESS_MEMORY_BYTES / thresholds.GIB)} "
        f"GiB whose utilisation stayed under {thresholds.IDLE_UTILIZATION_RATIO:.0%} for "
        f"{thresholds.IDLE_AVG_WINDOW}: forgotten notebooks, hung jobs, debuggers stopped at a "
        f"breakpoint. After {thresholds.IDLE_FOR} GpuProcessIdle fires for their user (one alert "
        "across nodes).",
        [
            panels.Column("Memory", f"sum without () ({idle})", "bytes"),
            # The filter itself, with the window's maximum as the value (one window read).
            panels.Column("Max utilisation",
                   f"max_over_time({sel(metrics.PROCESS_UTILIZATION, proc)}"
                   f"[{thresholds.IDLE_AVG_WINDOW}]) < {num(thresholds.IDLE_UTILIZATION_RATIO)} "
                   f"and {sel(metrics.PROCESS_MEMORY, proc)} > "
                   f"{num(thresholds.IDLE_PROCESS_MEMORY_BYTES)}",
                   "percentunit"),
            panels.Column("Age", f"time() - {sel(metrics.PROCESS_START_TIME, proc)} and ({idle})",
                          "s"),
        ],
        hidden=("Time", "__name__", "job", "instance", "uuid", "uid"),
        sort_by="Memory",
    ), 24, 8)
    grid.add(panels.timeseries_panel(
        "Process memory by user", "GPU memory of all processes of each user on the selected "
        "GPUs, stacked: who is filling this node.", "bytes",
        [panels.sum_by("user", _on_gpus(metrics.USER_MEMORY))],
        stacked=True,
        min_val=0,
    ), 12)
    grid.add(panels.timeseries_panel(
        "Process memory", f"GPU memory of the {TOP_PROCESSES} processes holding the most at "
        "each moment. A process whose line only climbs is "
        "leaking; check torch.cuda.memory_summary() inside it.", "bytes",
        [_top_processes(metrics.PROCESS_MEMORY)], min_val=0,
    ), 12)
    grid.add(panels.timeseries_panel(
        "Process utilisation", f"Share of time the kernels of the {TOP_PROCESSES} busiest "
        "processes ran on the GPU. 0 with "
        "memory held means the process is idle or waiting for input.", "percentunit",
        [_top_processes(metrics.PROCESS_UTILIZATION)], min_val=0, max_val=1,
    ), 12)
    grid.add(panels.timeseries_panel(
        "Processes per GPU", "Number of processes holding a context on each GPU.", "short",
        [panels.query(_on_gpus(metrics.PROCESSES), GPU_LEGEND)], min_val=0,
    ), 12)


def _forgotten(grid: panels.Layout) -> None:
    """Forgotten processes of this node now, by the time their kernels last ran (one node's
    processes at one instant; over weeks: gpu-exporter report)."""
    grid.row("Forgotten processes")
    hidden = ("Time", "__name__", "job", "instance", "uuid", "uid")
    process = f"{HOST_GPU}, {NOT_OVERFLOW}"
    memory = sel(metrics.PROCESS_MEMORY, process)
    idle_for = f"(time() - {records.idle_since(process)})"
    # Memory x idle time of the processes over both floors (each filter drops the others).
    forgotten = (f"topk({TOP_TABLE}, ({memory} > {num(thresholds.IDLE_PROCESS_MEMORY_BYTES)}) "
                 f"* ({idle_for} > {seconds(thresholds.IDLE_FOR)}))")
    grid.add(panels.table_panel(
        "Forgotten processes now", f"Processes holding over "
        f"{num(thresholds.IDLE_PROCESS_MEMORY_BYTES / thresholds.GIB)} GiB whose kernels last ran "
        f"over {thresholds.IDLE_FOR} ago (gpu_process_last_active_timestamp_seconds; since they "
        "started if no kernel was seen since the exporter watched them), ranked by GiB-hours "
        "held idle (memory x idle time): memory, idle for, age. Fleet-wide, per user: the GPU "
        "efficiency dashboard; per process over weeks: gpu-exporter report.",
        [
            panels.Column("Idle GiB-hours", f"{forgotten} / {num(thresholds.GIB)} / 3600",
                          "short"),
            panels.Column("Memory", f"{memory} and {forgotten}", "bytes"),
            # Memory x idle time over memory: two selectors fewer than idle_for's own.
            panels.Column("Idle for", f"{forgotten} / {memory}", "s",
                          panels.steps(("orange", None), ("red", float(24 * 3600)))),
            panels.Column("Age", f"(time() - {sel(metrics.PROCESS_START_TIME, process)}) "
                          f"and {forgotten}", "s"),
        ],
        hidden=hidden, sort_by="Idle GiB-hours",
    ), 24, 8)


def _inside(grid: panels.Layout) -> None:
    """PyTorch's own figures for processes that publish them (gpu_exporter_torch)."""
    # Collapsed: only processes running the publisher have these series.
    grid.row("Inside the processes (PyTorch allocator)", collapsed=True)
    proc = f"{HOST_GPU}, {NOT_OVERFLOW}"
    allocated, reserved = sel(allocator.TORCH_ALLOCATED, proc), sel(allocator.TORCH_RESERVED, proc)
    overhead = sel(allocator.TORCH_DRIVER_OVERHEAD, proc)
    publisher = ("Only processes running the allocator publisher (gpu-exporter-run, or "
                 "gpu_exporter_torch.start() in the code) with the exporter's --collector.torch "
                 "have these series.")
    grid.add(panels.timeseries_panel(
        "Process memory split", "Each publishing process's GPU memory, stacked in three parts "
        "that add up to its NVML memory: tensors (torch.cuda.memory_allocated()), the "
        "allocator's cache (memory_reserved() - memory_allocated(): freed blocks PyTorch keeps "
        "for reuse, unusable by other processes) and context and libraries (NVML minus "
        "reserved: CUDA context, kernels, cuBLAS/NCCL workspaces). " + publisher, "bytes",
        [panels.query(allocated, f"{PROCESS_LEGEND} tensors"),
         panels.query(f"{reserved} - {allocated}", f"{PROCESS_LEGEND} allocator cache", ref="B"),
         panels.query(overhead, f"{PROCESS_LEGEND} context and libraries", ref="C")],
        stacked=True, min_val=0,
    ), 24, 9)
    grid.add(panels.table_panel(
        "PyTorch allocator per process", "Now, per publishing process: NVML's memory and its "
        "parts, the peak of live tensors since the process started, fragmentation (inactive "
        "split blocks / reserved) and, over the last hour, allocation retries (cache flushes "
        "to find room: slow steps) and out-of-memory errors PyTorch raised (caught or not). "
        + publisher,
        [
            panels.Column("NVML memory", f"{sel(metrics.PROCESS_MEMORY, proc)} and on (job, "
                          f"instance, uuid, pid) {reserved}", "bytes"),
            panels.Column("Tensors", f"sum without () ({allocated})", "bytes"),
            panels.Column("Cache", f"sum without () ({reserved} - {allocated})", "bytes"),
            panels.Column("Context", f"sum without () ({overhead})", "bytes"),
            panels.Column("Peak tensors",
                   f"sum without () ({sel(allocator.TORCH_PEAK_ALLOCATED, proc)})", "bytes"),
            panels.Column("Fragmentation",
                   f"sum without () ({sel(allocator.TORCH_INACTIVE_SPLIT, proc)} / "
                   f"{reserved})", "percentunit"),
            panels.Column("Retries 1h", f"sum without () (increase("
                   f"{sel(allocator.TORCH_ALLOC_RETRIES, proc)}[1h]))", "short"),
            panels.Column("OOMs 1h",
                   f"sum without () (increase({sel(allocator.TORCH_OOMS, proc)}[1h]))", "short"),
        ],
        hidden=("Time", "__name__", "job", "instance", "uuid"),
        sort_by="NVML memory",
    ), 24, 8)
    grid.add(panels.timeseries_panel(
        "Allocation retries and OOMs", "Per publishing process and interval: allocation "
        "retries (a cudaMalloc failed, PyTorch flushed its cache and tried again) and "
        "out-of-memory errors raised. Retries that keep coming mean fragmentation or a GPU "
        "shared too tightly; alerts GpuProcessTorchAllocRetries and "
        "GpuProcessTorchOutOfMemory. The per-user lines count exited processes too (a job "
        "that died of its OOM).", "short",
        [panels.query(f"increase({sel(allocator.TORCH_ALLOC_RETRIES, proc)}[$__rate_interval])",
                      f"{PROCESS_LEGEND} retries"),
         panels.query(f"increase({sel(allocator.TORCH_OOMS, proc)}[$__rate_interval])",
                      f"{PROCESS_LEGEND} OOMs", ref="B"),
         panels.query(f"sum by (user) (increase({sel(allocator.USER_TORCH_ALLOC_RETRIES, HOST_GPU)}"
                      "[$__rate_interval]))", "{{user}} retries, all processes", ref="C"),
         panels.query(f"sum by (user) (increase({sel(allocator.USER_TORCH_OOMS, HOST_GPU)}"
                      "[$__rate_interval]))", "{{user}} OOMs, all processes", ref="D")],
        min_val=0,
    ), 12)
    grid.add(panels.timeseries_panel(
        "Fragmentation and peak", "Inactive split bytes (cached blocks split off larger "
        "segments that cannot be returned to the driver) against active bytes, and the peak of "
        "live tensors: a peak far above the current tensors means one phase (evaluation, the "
        "first step, a long sequence) sets the memory the process needs.", "bytes",
        [panels.query(sel(allocator.TORCH_INACTIVE_SPLIT, proc),
                      f"{PROCESS_LEGEND} inactive split"),
         panels.query(sel(allocator.TORCH_ACTIVE, proc), f"{PROCESS_LEGEND} active", ref="B"),
         panels.query(sel(allocator.TORCH_PEAK_ALLOCATED, proc), f"{PROCESS_LEGEND} peak tensors",
                      ref="C")],
        min_val=0,
    ), 12)


def build() -> dashboard.Dashboard:
    """The node / device dashboard builder."""
    built = panels.board(
        "GPU node / device", UID,
        "One node: each GPU's memory, load, temperature, power, clocks, processes.",
        variables.host_chain(variables.gpu(), one_node=True), since="now-3h",
    )
    grid = panels.Layout(built)
    _device(grid)
    node_activity_rows(grid, HOST_GPU)
    _processes(grid)
    _forgotten(grid)
    _inside(grid)
    node_health_rows(grid, HOST_GPU)
    node_nvlink_rows(grid, HOST_GPU)
    node_mig_rows(grid, HOST_GPU)
    return built
