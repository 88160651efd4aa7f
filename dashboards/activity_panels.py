"""The node dashboard's GPU-activity row: what the SMs, tensor cores and memory really did
(GPM, Hopper and newer; ``exporter.catalogue.metrics.activity``), set against NVML's utilisation. SM
activity per MIG instance stands in the MIG row, with everything else per instance.

Per-process views stay on per-process SM utilisation: GPM counts per GPU and MIG instance.
"""

from __future__ import annotations

from dashboards.panels import (
    GPU_LEGEND,
    Column,
    Layout,
    query,
    steps,
    table_panel,
    timeseries_panel,
)
from dashboards.promql import num, sel
from exporter.catalogue import metrics, thresholds

HIDDEN = ("Time", "__name__", "job", "instance", "uuid")
GPM = ("From GPM (Hopper and newer GPUs); GPUs without it have no series here "
       "(gpu_exporter_gpm_status says why).")


def _average(metric: metrics.Metric, matchers: str, *extra: str) -> str:
    return f"avg_over_time({sel(metric, matchers, *extra)}[{thresholds.ACTIVITY_VIEW_WINDOW}])"


def node_activity_rows(grid: Layout, matchers: str) -> None:
    """Utilisation against SM activity, busy-but-barely-working and tensor-cores-unused GPUs,
    compute- against memory-bound, pipes, occupancy, links, and MIG instances."""
    grid.row("GPU activity (SMs, tensor cores, memory bandwidth)")
    window = thresholds.ACTIVITY_VIEW_WINDOW
    util = _average(metrics.UTILIZATION, matchers)
    sm = _average(metrics.SM_ACTIVE, matchers)
    grid.add(timeseries_panel(
        "Utilisation vs SM activity", "Utilisation is the share of time any kernel ran; SM "
        "activity the share of the SMs that were busy. A matrix product keeps both near 100 %; "
        "utilisation far above SM activity means kernels too small to fill the GPU (small "
        "batches, a launch-bound loop, one block spinning on a flag). " + GPM, "percentunit",
        [query(sel(metrics.UTILIZATION, matchers), f"{GPU_LEGEND} utilisation"),
         query(sel(metrics.SM_ACTIVE, matchers), f"{GPU_LEGEND} SM activity")],
        min_val=0, max_val=1,
    ), 12)
    grid.add(table_panel(
        "Busy but barely working", f"GPUs whose utilisation averaged over "
        f"{thresholds.BARELY_WORKING_UTILIZATION_RATIO:.0%} in the last {window} while their "
        f"SM activity stayed under {thresholds.BARELY_WORKING_SM_RATIO:.0%}: kernels run all "
        "the time but use a sliver of the GPU. Look at the batch size, at the data loader, "
        "or for a job stuck in a spinning kernel. " + GPM,
        [Column("SM activity", f"{sm} < {num(thresholds.BARELY_WORKING_SM_RATIO)} and {util} > "
                f"{num(thresholds.BARELY_WORKING_UTILIZATION_RATIO)}", "percentunit",
                steps(("red", None), ("orange", 0.1))),
         Column("Utilisation", f"{util} and {sm} < {num(thresholds.BARELY_WORKING_SM_RATIO)}",
                "percentunit"),
         Column("Occupancy", f"{_average(metrics.SM_OCCUPANCY, matchers)} and {sm} < "
                f"{num(thresholds.BARELY_WORKING_SM_RATIO)} and {util} > "
                f"{num(thresholds.BARELY_WORKING_UTILIZATION_RATIO)}", "percentunit")],
        hidden=HIDDEN, sort_by="Utilisation",
    ), 12)
    tensor = _average(metrics.TENSOR_ACTIVE, matchers)
    busy_sms = f"{sm} > {num(thresholds.TENSOR_UNUSED_SM_RATIO)}"
    fp32 = _average(metrics.PIPE_ACTIVE, matchers, 'pipe="fp32"')
    grid.add(table_panel(
        "Tensor cores unused", f"GPUs whose SMs were over "
        f"{thresholds.TENSOR_UNUSED_SM_RATIO:.0%} busy in the last {window} while their tensor "
        f"cores worked under {thresholds.TENSOR_UNUSED_RATIO:.0%} of the time: in a training "
        "job, matrix products running in FP32 on the CUDA cores. Mixed precision "
        "(torch.autocast with bf16/fp16) or TF32 (torch.backends.cuda.matmul.allow_tf32) "
        "moves them to the tensor cores, several times faster. " + GPM,
        [Column("Tensor activity", f"{tensor} < {num(thresholds.TENSOR_UNUSED_RATIO)} and "
                f"{busy_sms}", "percentunit"),
         Column("SM activity", f"{sm} > {num(thresholds.TENSOR_UNUSED_SM_RATIO)} and {tensor} "
                f"< {num(thresholds.TENSOR_UNUSED_RATIO)}", "percentunit"),
         Column("FP32 pipe", f"{fp32} and ignoring (pipe) ({tensor} < "
                f"{num(thresholds.TENSOR_UNUSED_RATIO)} and {busy_sms})", "percentunit")],
        hidden=(*HIDDEN, "pipe"), sort_by="SM activity",
    ), 12)
    grid.add(timeseries_panel(
        "Compute- or memory-bound: SM vs DRAM activity", "SM activity against DRAM bandwidth "
        "used (share of the GPU's peak). DRAM over "
        f"{thresholds.MEMORY_BOUND_DRAM_RATIO:.0%}: memory-bound (copies, elementwise kernels, "
        "attention at small batch); busy SMs with low DRAM: compute-bound (large matrix "
        "products); both low: the GPU waits (input pipeline, CPU, communication). " + GPM,
        "percentunit",
        [query(sel(metrics.SM_ACTIVE, matchers), f"{GPU_LEGEND} SM"),
         query(sel(metrics.DRAM_ACTIVE, matchers), f"{GPU_LEGEND} DRAM")],
        thresholds=steps(("transparent", None), ("orange", thresholds.MEMORY_BOUND_DRAM_RATIO)),
        min_val=0, max_val=1,
    ), 12)
    grid.add(timeseries_panel(
        "Tensor cores and arithmetic pipes", "Share of time the tensor cores (any precision, "
        "and by kind: hmma FP16/BF16/TF32/FP8, imma integer, dfma/dmma FP64) and the non-tensor "
        "FP64, FP32, FP16 and integer pipes were busy. " + GPM, "percentunit",
        [query(sel(metrics.TENSOR_ACTIVE, matchers), f"{GPU_LEGEND} tensor"),
         query(f"{sel(metrics.TENSOR_PIPE_ACTIVE, matchers)} > 0",
               f"{GPU_LEGEND} tensor {{{{pipe}}}}"),
         query(f"{sel(metrics.PIPE_ACTIVE, matchers)} > 0", f"{GPU_LEGEND} {{{{pipe}}}}")],
        min_val=0, max_val=1,
    ), 12)
    grid.add(timeseries_panel(
        "SM occupancy", "Warps resident on the SMs as a share of the most they can hold. Large "
        "matrix products run at 10-20 %; low occupancy with low SM activity: too little work "
        "per kernel. " + GPM, "percentunit",
        [query(sel(metrics.SM_OCCUPANCY, matchers), GPU_LEGEND)], min_val=0, max_val=1,
    ), 12)
    grid.add(timeseries_panel(
        "PCIe and NVLink traffic", "Bytes per second over PCIe (host transfers, data loading) "
        "and NVLink (GPU to GPU: all-reduce, pipeline stages), averaged over each collection. "
        + GPM, "binBps",
        [query(sel(metrics.PCIE_TRAFFIC, matchers), f"{GPU_LEGEND} PCIe {{{{direction}}}}"),
         query(sel(metrics.NVLINK_TRAFFIC, matchers), f"{GPU_LEGEND} NVLink {{{{direction}}}}")],
        min_val=0,
    ), 24)
