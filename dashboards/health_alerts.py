"""Alerts on XID errors and on memory repair (row remapping, page retirement).

XID alerts read ``gpu_last_xid_timestamp_seconds`` rather than ``increase()`` of the counter:
the counter's series appears with its first event already counted, which ``increase()`` cannot
see, so the first XID of a code on a GPU would never alert. The time of the last event fires at
the next evaluation and keeps the alert active for XID_RECENT_SECONDS after the last one.
"""

from __future__ import annotations

from dashboards import xids
from dashboards.promql import num
from dashboards.rules import GPU_TEXT, AlertRule, RuleGroup, fires_under
from exporter.catalogue import metrics
from exporter.catalogue.thresholds import (
    REMAP_PENDING_FOR,
    XID_NOT_WATCHED_FOR,
    XID_RECENT_SECONDS,
    XID_STORM_FOR,
    XID_STORM_RATE,
    XID_STORM_WINDOW,
)

XID_ERRORS = metrics.XID_ERRORS.name
LAST_XID = metrics.LAST_XID.name
XID_REGISTERED = metrics.XID_EVENTS_REGISTERED.name
REMAP_PENDING = metrics.REMAP_PENDING.name
REMAP_FAILURE = metrics.REMAP_FAILURE.name
RETIRED_PENDING = metrics.RETIRED_PENDING.name

_MIG = ("{{ with $labels.gpu_instance }}, MIG GPU instance {{ . }}"
        "{{ with $labels.gpu_profile }} ({{ . }}){{ end }}{{ end }}")


def _recent(kind: xids.XidClass) -> str:
    return (f'time() - {LAST_XID}{{xid=~"{xids.regex(kind)}"}} '
            f"< {num(XID_RECENT_SECONDS)}")


def xid_group() -> RuleGroup:
    """XIDs: hardware faults at once, application faults for information, storms."""
    minutes = XID_RECENT_SECONDS // 60
    hardware = AlertRule(
        alert="GpuXidHardwareError",
        expr=_recent(xids.XidClass.HARDWARE),
        for_="0s",
        severity="critical",
        audience="operator",
        summary="A GPU reported an XID that means a hardware fault or lost data.",
        description=(
            f"{GPU_TEXT} reported XID {{{{ $labels.xid }}}}{_MIG} "
            "{{ $value | humanizeDuration }} ago: a hardware fault or lost data (uncorrectable "
            "memory error, NVLink, fallen off the bus, GPU firmware). Drain the GPU and follow "
            "the runbook's XID table. "
            f"Stays active {minutes} minutes after the last such XID."
        ),
        when=(
            "an XID meaning a hardware fault or lost data (48, 62, 64, 74, 79, 94, 95, 119, 120, "
            "140) in the last 15m"
        ),
        live=fires_under("xid-storm/1", "remap-pending/1", only_that_gpu=True),
        runbook="""\
**Meaning:** the driver reported an XID that means a hardware fault or lost data (codes 48, 62,
64, 74, 79, 94, 95, 119, 120, 140: uncorrectable memory errors, NVLink, fallen off the bus, GSP
firmware) on that GPU in the last 15 minutes. The alert fires at the first such event, without
waiting. **Impact:** jobs on the GPU may have computed with corrupted data or crashed; the GPU
may stop answering.

1. Look up the code in the [XID table](#xid-codes-what-they-mean-and-who-acts) below: it says
   whether to drain and reset the GPU, reboot the node, or call the vendor.
2. On the node: `dmesg -T | grep -i xid` (or `journalctl -k | grep -i xid`) shows the full
   driver line, for example `NVRM: Xid (PCI:0000:19:00): 79, pid=..., GPU has fallen off the
   bus.`; the line carries the PID of the process that was running, which NVML's event does not.
3. Drain first (Kubernetes: `kubectl cordon <node>` and evict the GPU pods; Slurm: `scontrol
   update nodename=<node> state=drain reason="xid <code>"`), then `nvidia-smi -r -i <gpu>` (no
   process may hold the GPU) or reboot. Check `nvidia-smi -q -d ROW_REMAPPER,ECC` afterwards.
4. Codes that repeat after a reset, or 64/79/140 at all: run `dcgmi diag -r 3` and open a case
   with the vendor (RMA).

The counter `gpu_xid_errors_total` counts events since the exporter started (NVML does not
replay older ones); `gpu_last_xid_timestamp_seconds` says when the last one arrived, which is
what the alert reads (an `increase()` would miss the first event of a new series). Under MIG the
`gpu_instance` / `compute_instance` labels name the instance the XID was attributed to.
""",
    )
    application = AlertRule(
        alert="GpuXidApplicationError",
        expr=_recent(xids.XidClass.APPLICATION),
        for_="0s",
        severity="info",
        audience="operator",
        summary="An application caused an XID on a GPU.",
        description=(
            f"{GPU_TEXT} reported XID {{{{ $labels.xid }}}}{_MIG} "
            "{{ $value | humanizeDuration }} ago: a job's own fault (kernel exception, illegal "
            "memory access); the GPU stays healthy. NVML does not say which process: the "
            "kernel log line (dmesg | grep Xid) carries its pid."
        ),
        when="an XID caused by an application (13, 31, 43, 68) in the last 15m",
        live=fires_under("xid-storm/0", "mig-node/0", only_that_gpu=True),
        runbook="""\
**Meaning:** an application on the GPU caused an XID the GPU survives (codes 13, 31, 43, 68: a
kernel fault, an illegal memory access, a job-reported fault, a video-decoder fault) in the last
15 minutes. **Impact:** that job failed or will fail; other jobs and the GPU are fine.

Shown per GPU (and per MIG instance). NVML's event data carries no process ID, so the exporter
cannot say which process: find it in the kernel log (`dmesg -T | grep -i xid` prints
`pid=<pid>, name=<process>`), or look at the *Processes* table of the node dashboard for who ran
on that GPU (or MIG instance) at that time. Tell the job's owner: 13 and 31 are usually bugs in
their code (run it under `compute-sanitizer`), 43 a fault the job itself reported. The same code
repeating on one GPU with *different* jobs points at the GPU instead: run `dcgmi diag -r 3`.
""",
    )
    storm = AlertRule(
        alert="GpuXidStorm",
        expr=(f"sum without (xid, gpu_instance, compute_instance) "
              f"(rate({XID_ERRORS}[{XID_STORM_WINDOW}])) > {num(XID_STORM_RATE)}"),
        for_=XID_STORM_FOR,
        severity="warning",
        audience="operator",
        summary="A GPU reports XIDs continuously.",
        description=(
            f"{GPU_TEXT} has reported more than one XID every {1 / XID_STORM_RATE:.0f} s for "
            f"{XID_STORM_FOR} (now {{{{ $value | humanize }}}} per second): something fails in a "
            "loop (a job restarting on a broken GPU, a firmware fault)."
        ),
        when="more than 10 XIDs a minute on one GPU for 5m",
        live=fires_under("xid-storm/0", only_that_gpu=True),
        runbook="""\
**Meaning:** a GPU has reported XIDs at more than one every 6 seconds (rate over 1 minute) for 5
minutes.
**Impact:** something is failing in a loop: a job restarting on a broken GPU, or the driver
repeatedly hitting a firmware fault; kernel logs fill up.

Look at `sum by (xid) (rate(gpu_xid_errors_total[5m]))` for the codes, then follow
[GpuXidHardwareError](#gpuxidhardwareerror) or [GpuXidApplicationError](#gpuxidapplicationerror).
Stop the job that keeps restarting there; drain the GPU if the codes are hardware ones.
""",
    )
    not_watched = AlertRule(
        alert="GpuXidEventsNotWatched",
        expr=f"{XID_REGISTERED} == 0",
        for_=XID_NOT_WATCHED_FOR,
        severity="info",
        audience="operator",
        summary="XID errors of a GPU cannot be counted.",
        description=(
            f"NVML does not deliver XID events for {GPU_TEXT} (registration not supported or "
            "failing): the XID alerts are blind for it. See the exporter's log."
        ),
        when="NVML refused XID events for a GPU, for 30m (its XID alerts are blind)",
        live=fires_under("xid-storm/3", only_that_gpu=True),
        runbook="""\
**Meaning:** NVML refused to register XID events on a GPU for 30 minutes (older GPUs, some
virtualised or containerised setups), or the GPU's event waiter keeps failing. **Impact:** the
XID alerts above are blind for that GPU: no XID will ever be counted there.

The exporter logs the reason once at start (`XID/health events not watched: ...`). In a
container, registration needs the GPU device nodes from the NVIDIA runtime. Where it cannot
work, silence the alert for that node and watch the kernel log for `NVRM: Xid` instead.
""",
    )
    return RuleGroup("gpu-xid", (hardware, application, storm, not_watched))


def memory_repair_group() -> RuleGroup:
    """Row remaps waiting for a reset, remap failures, pages waiting for retirement."""
    pending = AlertRule(
        alert="GpuRowRemapPending",
        expr=f"{REMAP_PENDING} == 1",
        for_=REMAP_PENDING_FOR,
        severity="warning",
        audience="operator",
        summary="A GPU needs a reset to remap faulty memory rows.",
        description=(
            f"{GPU_TEXT} has memory rows remapped after ECC errors that take effect only after a "
            "GPU reset. Jobs keep running; reset the GPU at the next convenient moment."
        ),
        when="remapped rows wait for a GPU reset, for 5m",
        live=fires_under("remap-pending/0", "remap-pending/1"),
        runbook="""\
**Meaning:** the GPU has remapped memory rows after ECC errors, and the remap waits for a GPU
reset to take effect (`nvidia-smi -q -d ROW_REMAPPER` shows `Pending: Yes`). **Impact:** none yet:
running jobs continue and new jobs may start (error containment and page blacklisting protect
them), but until the reset the faulty rows stay in use.

Operator: at the next convenient moment drain the GPU and reset it (`nvidia-smi -r -i <gpu>`) or
reboot the node; afterwards `Pending` must read `No`. Reset before moving a live VM onto this
GPU. Many remaps in a short time (`gpu_remapped_rows_total`) point at failing memory: see
[GpuRowRemapFailed](#gpurowremapfailed).
""",
    )
    failure = AlertRule(
        alert="GpuRowRemapFailed",
        expr=f"{REMAP_FAILURE} == 1",
        for_="0s",
        severity="critical",
        audience="operator",
        summary="A GPU failed to remap faulty memory rows: it needs replacing.",
        description=(
            f"{GPU_TEXT} reports a failed row remap: a memory bank has no spare rows left, so "
            "further memory errors cannot be repaired. Drain it and contact the vendor (RMA)."
        ),
        when="a row remap failed (replace the GPU)",
        live=fires_under("remap-pending/1", only_that_gpu=True),
        runbook="""\
**Meaning:** a row remap failed on this GPU (`nvidia-smi -q -d ROW_REMAPPER` shows
`Remapping Failure Occurred: Yes`): a memory bank ran out of spare rows. The flag stays set for
the life of the GPU. **Impact:** further memory errors there cannot be repaired; uncorrectable
errors (XID 48/94/95) will keep killing jobs.

Operator: drain the GPU and keep it out of service; vendor: a remap failure is what NVIDIA's
"RMA policy thresholds for row remapping" are about: open a case with the output of
`nvidia-bug-report.sh`.
""",
    )
    retired = AlertRule(
        alert="GpuRetiredPagesPending",
        expr=f"{RETIRED_PENDING} == 1",
        for_=REMAP_PENDING_FOR,
        severity="warning",
        audience="operator",
        summary="A GPU needs a reset to retire faulty memory pages.",
        description=(
            f"{GPU_TEXT} has memory pages waiting for retirement after ECC errors; they are "
            "retired at the next GPU reset or reboot."
        ),
        when="retired pages wait for a reset (GPUs before Ampere), for 5m",
        live=fires_under("remap-pending/3", only_that_gpu=True),
        runbook="""\
**Meaning:** (GPUs before Ampere, which retire pages instead of remapping rows) memory pages
were marked for retirement and wait for a GPU reset or reboot (`nvidia-smi -q -d
PAGE_RETIREMENT` shows `Pending Page Blacklist: Yes`). **Impact:** as for a pending row remap.

Operator: drain and reset the GPU or reboot the node when convenient. Many retired pages
(`gpu_retired_pages_total`; page retirement allows at most 64) mean the GPU should be replaced.
""",
    )
    return RuleGroup("gpu-memory-repair", (pending, failure, retired))
