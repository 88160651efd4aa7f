"""Dashboard 5: workloads - which pod, Slurm job or container holds each GPU, allocated or not.

Allocations come from the kubelet (pods) and from Slurm's prolog files (jobs); both feed the
*allocated but idle* views.

Device metrics are attributed to a pod only for GPUs it owns alone (``sharing="exclusive"``
whole GPUs, see docs/attribution.md §4); memory per namespace, pod, job and container comes
from the process series, which is exact on shared GPUs too.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard

from dashboards import alerts, recording, variables
from dashboards.fleet import COUNT_WARN
from dashboards.panels import (
    Column,
    Layout,
    board,
    query,
    stat_panel,
    steps,
    sum_by,
    table_panel,
    timeseries_panel,
)
from dashboards.promql import allocated_idle, count_or_zero, owned, sel, sel_record
from dashboards.variables import HOST
from exporter.catalogue import metrics, thresholds

UID = "gpu-exporter-workloads"
NAMESPACE = 'namespace=~"$namespace"'
POD = 'pod=~"$pod"'
SLURM_JOB = 'slurm_job=~"$slurm_job"'
K8S = f'{HOST}, {NAMESPACE}, {POD}'
WORKLOAD = (NAMESPACE, POD)
ALLOC = sel(metrics.ALLOCATION_INFO, K8S)
HIDDEN = ("Time", "__name__", "job", "instance")
SHARED = 'sharing="shared"'
IN_POD, IN_JOB, IN_CONTAINER = 'pod!=""', 'slurm_job!=""', 'container_id!=""'
POD_MEM = sel(metrics.WORKLOAD_MEMORY, K8S, IN_POD)
POD_UTIL = sel(metrics.WORKLOAD_UTILIZATION, K8S, IN_POD)
SHARED_ALLOC = sel(metrics.ALLOCATION_INFO, K8S, SHARED)
# The GPUs' window average recorded by the gpu-idle group (one sample per GPU and step, not a
# 15-minute window of raw samples per step: the slowest query at 100 nodes otherwise).
IDLE = allocated_idle(HOST, *WORKLOAD, ratio=thresholds.IDLE_UTILIZATION_RATIO,
                      window=thresholds.IDLE_AVG_WINDOW,
                      average=sel_record(alerts.GPU_ACTIVITY_AVG, HOST))
JOB_IDLE = allocated_idle(HOST, SLURM_JOB, IN_JOB, ratio=thresholds.IDLE_UTILIZATION_RATIO,
                          window=thresholds.IDLE_AVG_WINDOW,
                          average=sel_record(alerts.GPU_ACTIVITY_AVG, HOST))


def _allocations(grid: Layout) -> None:
    grid.row("GPU allocations (kubelet)")
    grid.add(stat_panel(
        "Allocated GPUs", "Devices the kubelet handed to the selected pods (whole GPUs, MIG "
        "devices; a time-sliced GPU counts once).", "short",
        query(count_or_zero(f"count by (job, instance, device_id) ({ALLOC})")),
    ), 4, 4)
    grid.add(stat_panel(
        "Allocated but idle", "Pod allocations with no process of the pod on the GPU, or a GPU "
        f"the pod owns alone averaging under {thresholds.IDLE_UTILIZATION_RATIO:.0%} activity "
        "(SM activity where the GPU reports it, else utilisation) "
        f"over {thresholds.IDLE_AVG_WINDOW} (alert GpuAllocatedIdle after {thresholds.IDLE_FOR}).",
        "short",
        query(count_or_zero(IDLE)), thresholds=steps(*COUNT_WARN),
    ), 4, 4)
    grid.add(stat_panel(
        "Shared allocations", "Allocations of time-sliced or MPS-shared GPUs: their device "
        "utilisation and power belong to every pod sharing them and are not split.", "short",
        query(count_or_zero(SHARED_ALLOC)),
    ), 4, 4)
    grid.add(stat_panel(
        "Memory of pods", "GPU memory held by the processes of the selected pods (exact on "
        "shared GPUs too: the driver accounts memory per process).", "bytes",
        query(f"sum({POD_MEM}) or vector(0)"),
    ), 4, 4)
    grid.add(stat_panel(
        "Memory of Slurm jobs", "GPU memory held by processes of the selected Slurm jobs.",
        "bytes",
        query(f"sum({sel(metrics.WORKLOAD_MEMORY, HOST, SLURM_JOB, IN_JOB)}) or vector(0)"),
    ), 4, 4)
    grid.add(stat_panel(
        "Memory of other containers", "GPU memory held by Docker, Podman, containerd or CRI-O "
        "containers outside Kubernetes.", "bytes",
        query(f"sum({sel(metrics.WORKLOAD_MEMORY, HOST, IN_CONTAINER)}) or vector(0)"),
    ), 4, 4)
    grid.add(stat_panel(
        "Kubelet PodResources API", "1 when every selected exporter's last poll of the "
        "kubelet's PodResources API succeeded; 0 means allocations are missing somewhere (alert "
        "GpuExporterPodResourcesFailing; see the status table).", "short",
        query(f"min({sel(metrics.POD_RESOURCES_UP, HOST)})"),
        thresholds=steps(("red", None), ("green", 1.0)),
    ), 4, 4)
    grid.add(table_panel(
        "PodResources status", "The outcome of each exporter's last PodResources poll: ok, "
        "socket_missing (not mounted, or another kubelet root dir), permission_denied (run as "
        "uid 0), unavailable, timeout, too_large, rejected, unimplemented, error.",
        [Column("Status", sel(metrics.POD_RESOURCES_STATUS, HOST), "short")],
    ), 20, 4)
    grid.add(table_panel(
        "GPUs owned by one pod", "Whole GPUs the kubelet gave to exactly one container: their "
        "memory, utilisation and power are that pod's.",
        [
            Column("Memory used", owned(metrics.MEMORY_USED, HOST, *WORKLOAD), "bytes"),
            Column("Memory total", owned(metrics.MEMORY_TOTAL, HOST, *WORKLOAD), "bytes"),
            Column("Utilisation", owned(metrics.UTILIZATION, HOST, *WORKLOAD), "percentunit"),
            Column("Power", owned(metrics.POWER_USAGE, HOST, *WORKLOAD), "watt"),
        ],
        hidden=HIDDEN, sort_by="Memory used",
    ), 24, 8)
    shared = (
        f"sum by (job, instance, gpu, uuid, namespace, pod) ({POD_MEM}) "
        f"and on (job, instance, uuid, namespace, pod) {SHARED_ALLOC}"
    )
    grid.add(table_panel(
        "Pods on shared GPUs", "Per pod and shared GPU: the memory its processes hold and their "
        "summed SM utilisation samples (time-slicing shares the GPU; device totals are not "
        "split between pods).",
        [
            Column("Pod memory", shared, "bytes"),
            Column("Pod SM utilisation",
                   f"sum by (job, instance, gpu, uuid, namespace, pod) ({POD_UTIL}) "
                   f"and on (job, instance, uuid, namespace, pod) {SHARED_ALLOC}", "percentunit"),
        ],
        hidden=HIDDEN, sort_by="Pod memory",
    ), 12, 8)
    grid.add(table_panel(
        "Allocated but idle", "Allocations of the selected pods that hold a GPU for nothing "
        "right now: no process of the pod on the GPU, or a GPU the pod owns alone averaging "
        f"under {thresholds.IDLE_UTILIZATION_RATIO:.0%} activity (SM activity where the GPU "
        f"reports it, else utilisation) over {thresholds.IDLE_AVG_WINDOW}. After "
        f"{thresholds.IDLE_FOR} the GpuAllocatedIdle alert fires (see its runbook).",
        [Column("Idle", f"max by (job, instance, gpu, uuid, namespace, pod, container) "
                        f"({IDLE})", "short")],
        hidden=HIDDEN,
    ), 12, 8)


def _claims(grid: Layout) -> None:
    """Dynamic Resource Allocation: each claim's GPUs with what they do now."""
    claims = sel(metrics.ALLOCATION_CLAIM_INFO, K8S)

    def on_claims(row: metrics.Metric) -> str:
        return f"{claims} * on (job, instance, uuid) group_left () {sel(row, HOST)}"

    grid.add(table_panel(
        "GPUs by DRA claim", "Devices a ResourceClaim (Dynamic Resource Allocation) gave the "
        "selected pods, as the kubelet reports them: the claim, its driver, pool and device, "
        "and what the GPU does now (the whole GPU's figures: a claim shared with other pods "
        "shares them). A claim's GPU at 0 % for long is what GpuAllocatedIdle reports.",
        [Column("GPU utilisation", on_claims(metrics.UTILIZATION), "percentunit"),
         Column("GPU memory used", on_claims(metrics.MEMORY_USED), "bytes"),
         Column("GPU power", on_claims(metrics.POWER_USAGE), "watt")],
        hidden=HIDDEN, sort_by="GPU utilisation",
    ), 24, 7)


def _usage(grid: Layout) -> None:
    grid.row("Namespaces and pods")
    grid.add(timeseries_panel(
        "GPU memory by namespace", "Memory held by each namespace's GPU processes, stacked.",
        "bytes", [sum_by("namespace", POD_MEM)], stacked=True, min_val=0,
    ), 12)
    grid.add(timeseries_panel(
        "GPU memory by pod", "Memory held by each pod's GPU processes.", "bytes",
        [query(f"sum by (namespace, pod) ({POD_MEM})", "{{namespace}}/{{pod}}")], min_val=0,
    ), 12)
    # Per pod from the workload recording group: one series per pod, not every GPU's series
    # joined with the allocations at every step.
    util = sel_record(recording.POD_UTILIZATION, HOST, *WORKLOAD)
    grid.add(timeseries_panel(
        "Utilisation of GPUs a pod owns", "Average utilisation of the whole GPUs each pod "
        "owns alone.", "percentunit",
        [query(f"avg by (namespace, pod) ({util})", "{{namespace}}/{{pod}}")],
        min_val=0, max_val=1,
    ), 12)
    power = sel_record(recording.POD_POWER, HOST, *WORKLOAD)
    grid.add(timeseries_panel(
        "Power of GPUs a pod owns", "Board power of the whole GPUs each pod owns alone, summed "
        "per pod.", "watt",
        [query(f"sum by (namespace, pod) ({power})", "{{namespace}}/{{pod}}")], min_val=0,
    ), 12)


def _jobs(grid: Layout) -> None:
    grid.row("Slurm jobs and containers")
    job_mem = sel(metrics.WORKLOAD_MEMORY, HOST, SLURM_JOB, IN_JOB)
    job_util = sel(metrics.WORKLOAD_UTILIZATION, HOST, SLURM_JOB, IN_JOB)
    job_alloc = sel(metrics.ALLOCATION_INFO, HOST, SLURM_JOB, IN_JOB)
    grid.add(stat_panel(
        "GPUs allocated to Slurm jobs", "Devices the selected jobs were given, from the "
        "prolog's allocation files (--slurm.allocation-dir).", "short",
        query(count_or_zero(job_alloc)),
    ), 6, 4)
    grid.add(stat_panel(
        "Slurm allocations idle", "Allocations of the selected jobs with no process of the job "
        "on the GPU, or a GPU the job holds alone averaging under "
        f"{thresholds.IDLE_UTILIZATION_RATIO:.0%} activity over {thresholds.IDLE_AVG_WINDOW} "
        f"(alert GpuAllocatedIdle after {thresholds.IDLE_FOR}).", "short",
        query(count_or_zero(JOB_IDLE)), thresholds=steps(*COUNT_WARN),
    ), 6, 4)
    grid.add(table_panel(
        "Slurm jobs holding GPUs idle", "Per job, user and GPU: allocations holding a GPU for "
        "nothing right now (no process of the job on it, or the job's GPU alone under "
        f"{thresholds.IDLE_UTILIZATION_RATIO:.0%} activity); `gpu-exporter report job <id>` "
        "summarises a job.",
        [Column("Idle", f"max by (job, instance, gpu, uuid, slurm_job, user) ({JOB_IDLE})",
                "short")],
        hidden=HIDDEN,
    ), 12, 4)
    grid.add(timeseries_panel(
        "GPU memory by Slurm job", "Memory held by each Slurm job's GPU processes (job id from "
        "the process's cgroup).", "bytes",
        [query(f"sum by (slurm_job) ({job_mem})", "job {{slurm_job}}")], stacked=True,
        min_val=0,
    ), 12)
    grid.add(table_panel(
        "Slurm jobs", "Per job: GPU memory, GPUs in use and the summed SM utilisation of the "
        "job's processes per GPU, averaged over its GPUs.",
        [
            Column("Memory", f"sum by (slurm_job) ({job_mem})", "bytes"),
            Column("GPUs", f"count by (slurm_job) ({job_mem})", "short"),
            Column("Avg SM utilisation", f"avg by (slurm_job) ({job_util})", "percentunit"),
        ],
        hidden=HIDDEN, sort_by="Memory",
    ), 12)
    container_mem = sel(metrics.WORKLOAD_MEMORY, HOST, IN_CONTAINER)
    grid.add(timeseries_panel(
        "GPU memory by container (outside Kubernetes)", "Memory held by Docker, Podman, "
        "containerd and CRI-O containers not in a pod; the name where the runtime's files give "
        "it, else the short ID.", "bytes",
        [query(f"sum by (container, container_id) ({container_mem})",
               "{{container}} {{container_id}}")], min_val=0,
    ), 24)


def build() -> dashboard.Dashboard:
    """The workloads dashboard builder."""
    built = board(
        "GPU workloads", UID,
        "Which pod, Slurm job or container holds each GPU, allocated or not.",
        variables.host_chain(*variables.workload_labels()),
    )
    grid = Layout(built)
    _allocations(grid)
    _claims(grid)
    _usage(grid)
    _jobs(grid)
    return built


__all__ = ["UID", "build"]
