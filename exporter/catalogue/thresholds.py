"""Every alert threshold and duration, defined once.

The alert rules (``dashboards/alerts.py``), the dashboards' colour thresholds and the landing
page's hints (``exporter/web/page.py``) all read these constants, so a dashboard turns red and
the page says "idle" exactly where an alert starts to fire. To tune them,
edit this file and run ``python -m dashboards.generate``: the rule YAML and dashboard JSON are
regenerated (and CI's ``--check`` keeps the committed files in step). The promtool unit tests
under ``dashboards/rules/tests/`` pin today's values; update them together with a change here.

Ratios are 0-1 (as the ``*_ratio`` metrics are); durations are Prometheus duration strings.
"""

from __future__ import annotations

from typing import Final

GIB: Final = 1024**3

# --- memory ---------------------------------------------------------------------------------
#: Device memory used / total above which a GPU is "almost full" (the seed guide's 90 %).
MEMORY_USED_RATIO: Final = 0.9
MEMORY_USED_FOR: Final = "5m"

#: The exhaustion forecast: fit the last LEAK_WINDOW and fire when the linear trend reaches the
#: GPU's total memory within LEAK_HORIZON_SECONDS ...
LEAK_WINDOW: Final = "30m"
LEAK_HORIZON_SECONDS: Final = 3600
#: ... and the last LEAK_RECENT_WINDOW alone also reaches it (still growing now, not a one-off
#: step such as loading a model) ...
LEAK_RECENT_WINDOW: Final = "5m"
#: ... and used memory really grew by at least this share of the total over LEAK_WINDOW (a flat,
#: noisy series can have a positive slope by chance).
LEAK_MIN_GROWTH_RATIO: Final = 0.05
LEAK_FOR: Final = "10m"

# --- idle holders and starved GPUs ----------------------------------------------------------
#: Activity below which a GPU (on average over IDLE_AVG_WINDOW) or a process (at every
#: collection within IDLE_AVG_WINDOW: a process that computed at all in the window is not idle)
#: counts as idle. A GPU's activity is its SM activity where it reports one (GPM, Hopper and
#: newer), else its utilisation; a process's is its SM utilisation. The exporter applies it per
#: process when it sums idle memory per user (``gpu_user_idle_memory_bytes``), with
#: IDLE_PROCESS_MEMORY_BYTES, and at every collection of its idle-accounting counters
#: (``exporter.attribution.accounting``).
IDLE_UTILIZATION_RATIO: Final = 0.05
IDLE_AVG_WINDOW: Final = "15m"
#: A GPU is "held" when at least this share of its memory is used (a bare CUDA context is
#: a few hundred MiB, well under 10 % of any data-centre GPU).
IDLE_GPU_MEMORY_RATIO: Final = 0.1
#: A process or user counts as an idle holder from this much memory on (the process floor is
#: applied by the exporter, like the ratio above).
IDLE_PROCESS_MEMORY_BYTES: Final = 1 * GIB
IDLE_USER_MEMORY_BYTES: Final = 4 * GIB
IDLE_FOR: Final = "1h"
#: Forgotten-process lists (node dashboard, report) rank idle stretches at least this long.
FORGOTTEN_MIN_IDLE_SECONDS: Final = 900

#: Starved (CPU- or input-bound): processes hold the GPU, it is not idle, yet average
#: activity stays under STARVED_UTILIZATION_RATIO and power under STARVED_POWER_RATIO of the
#: limit ("power that never rises").
STARVED_UTILIZATION_RATIO: Final = 0.4
STARVED_POWER_RATIO: Final = 0.4
STARVED_AVG_WINDOW: Final = "15m"
STARVED_FOR: Final = "30m"

# --- notifications ----------------------------------------------------------------------------
#: An owner alert (``audience: owner``) still firing this long after it first fired raises
#: GpuOwnerAlertUnresolved, which Alertmanager sends to the lab lead or operator: the owner
#: was told and has not acted (idle memory held a day after the first notice).
OWNER_ESCALATE_AFTER: Final = "24h"

# --- temperature, power and throttling ------------------------------------------------------
TEMPERATURE_WARNING_CELSIUS: Final = 80.0
TEMPERATURE_WARNING_FOR: Final = "5m"
TEMPERATURE_CRITICAL_CELSIUS: Final = 90.0
TEMPERATURE_CRITICAL_FOR: Final = "2m"
THROTTLE_FOR: Final = "5m"
#: Where the GPU counts throttle time: the share of the last THROTTLE_FOR a reason must hold
#: the clocks back (elsewhere the reason must be active at each evaluation).
THROTTLE_TIME_SHARE: Final = 0.5
POWER_CAP_FOR: Final = "30m"

# --- health ---------------------------------------------------------------------------------
GPU_DOWN_FOR: Final = "2m"
#: How far back a GPU must have been seen for its disappearance to alert.
GPU_MISSING_LOOKBACK: Final = "1h"
GPU_MISSING_FOR: Final = "5m"
ECC_WINDOW: Final = "15m"

# --- inside the process (PyTorch allocator, group torch) -------------------------------------
#: An out-of-memory error PyTorch raised in a process (caught or not) alerts for this long.
TORCH_OOM_WINDOW: Final = "10m"
#: Allocation retries (cudaMalloc failed, cache flushed, retried) above this many per window,
#: sustained: the process runs at the edge of the GPU's memory or its cache is fragmented.
TORCH_RETRIES_WINDOW: Final = "15m"
TORCH_RETRIES_THRESHOLD: Final = 3
TORCH_RETRIES_FOR: Final = "20m"  # longer than the window: one burst never fires
# --- XID errors and memory repair -----------------------------------------------------------
#: An XID keeps its alert active this long after it arrived (seconds).
XID_RECENT_SECONDS: Final = 900
#: XIDs per second (over XID_STORM_WINDOW, sustained for XID_STORM_FOR) above which a GPU is
#: in an XID storm: more than one every 6 s.
XID_STORM_RATE: Final = 1 / 6
XID_STORM_WINDOW: Final = "1m"
XID_STORM_FOR: Final = "5m"
XID_NOT_WATCHED_FOR: Final = "30m"
REMAP_PENDING_FOR: Final = "5m"

# --- the exporter itself --------------------------------------------------------------------
#: Scrape jobs the exporter-down alert watches (a regular expression on ``job``).
EXPORTER_JOB_REGEX: Final = ".*gpu-exporter.*"
EXPORTER_DOWN_FOR: Final = "5m"
COLLECTION_FAILING_FOR: Final = "10m"
#: The kubelet's PodResources API unreadable this long: allocations (and GpuAllocatedIdle) go.
POD_RESOURCES_FAILING_FOR: Final = "10m"
SOURCE_DOWN_FOR: Final = "5m"
#: Data older than this is stale (the exporter's own --collector.stale-after defaults to 30 s).
DATA_STALE_SECONDS: Final = 60.0
DATA_STALE_FOR: Final = "5m"
ERRORS_WINDOW: Final = "15m"
ERRORS_THRESHOLD: Final = 10

# --- per-job summaries (``gpu-exporter report job``; notes in ``job_notes.py``) ----------------
#: A job's GPU whose utilisation averaged under this while the job held it gets a note.
JOB_LOW_UTILIZATION_RATIO: Final = 0.15
#: Peak memory under this share of the GPU's: a smaller GPU or a MIG slice would do.
JOB_SMALL_MEMORY_RATIO: Final = 0.25
#: FP32 pipes busy at least this share of the time (with the SMs busy and the tensor cores not,
#: ``TENSOR_UNUSED_*`` below): the job's math runs in FP32.
JOB_FP32_PIPE_RATIO: Final = 0.1
#: Allocated-but-idle time above this share of the time held gets a note; from
#: JOB_MOSTLY_IDLE_SHARE on it is the GPU's only note (how it was used hardly matters).
JOB_IDLE_SHARE: Final = 0.25
JOB_MOSTLY_IDLE_SHARE: Final = 0.9

# --- dashboards only ------------------------------------------------------------------------
#: Colour step where a gauge turns amber before the alert threshold.
MEMORY_AMBER_RATIO: Final = 0.75
#: GPM views of the node dashboard, over ACTIVITY_VIEW_WINDOW. "Busy but barely working":
#: kernels run most of the time (utilisation) yet keep few SMs busy (small kernels, one block
#: spinning, batches too small to fill the GPU).
ACTIVITY_VIEW_WINDOW: Final = "5m"
BARELY_WORKING_UTILIZATION_RATIO: Final = 0.5
BARELY_WORKING_SM_RATIO: Final = 0.25
#: "Tensor cores unused": the SMs are busy, the tensor cores nearly never (matrix products in
#: FP32 without TF32 or mixed precision).
TENSOR_UNUSED_SM_RATIO: Final = 0.5
TENSOR_UNUSED_RATIO: Final = 0.05
#: DRAM bandwidth share from which a GPU counts as memory-bound (a device-to-device copy on an
#: H200: 0.87; a large fp16 matrix product: 0.17).
MEMORY_BOUND_DRAM_RATIO: Final = 0.5
