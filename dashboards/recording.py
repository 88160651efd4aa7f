"""Recording rules for fleet aggregates, named ``level:metric:operations``.

Aggregations use ``without`` (keeping target labels such as ``node``) at the per-GPU and
per-instance levels, and ``by (job)`` at the fleet level; ratios divide separately aggregated
sums. The fleet and users dashboards read the per-instance series (a fleet panel then costs
one series per node, not one per GPU or process), so load these groups wherever the dashboards
are used; alerts read raw metrics or the recording rules of their own group, so they work
without these.
"""

from __future__ import annotations

from dashboards.promql import HOSTNAME_RECORD, POD_ALLOCATION, owned, sel
from dashboards.rules import RecordingRule, RuleGroup
from exporter.catalogue import metrics
from exporter.catalogue.workloads import KINDS, SLURM, WorkloadKind, label_names

_GPU = ", ".join(metrics.GPU_LABELS)
used, total = metrics.MEMORY_USED.name, metrics.MEMORY_TOTAL.name
#: Names the dashboards read.
GPU_MEMORY_RATIO = "instance_gpu:gpu_memory_used:ratio"
INSTANCE_MEMORY_USED = f"instance:{used}:sum"
INSTANCE_MEMORY_TOTAL = f"instance:{total}:sum"
INSTANCE_MEMORY_RATIO = "instance:gpu_memory_used:ratio"
INSTANCE_UTILIZATION = f"instance:{metrics.UTILIZATION.name}:avg"
INSTANCE_SM_ACTIVE = f"instance:{metrics.SM_ACTIVE.name}:avg"
INSTANCE_POWER = f"instance:{metrics.POWER_USAGE.name}:sum"
INSTANCE_TEMPERATURE = f"instance:{metrics.TEMPERATURE.name}:max"
INSTANCE_GPUS_UP = f"instance:{metrics.GPU_UP.name}:sum"
INSTANCE_GPUS = "instance:gpus:count"
INSTANCE_USER_MEMORY = f"instance_user:{metrics.USER_MEMORY.name}:sum"
INSTANCE_OVERFLOW = f"instance:{metrics.PROCESS_SERIES_OVERFLOW.name}:sum"
POD_UTILIZATION = f"namespace_pod:{metrics.UTILIZATION.name}:avg"
POD_POWER = f"namespace_pod:{metrics.POWER_USAGE.name}:sum"


def gpu_group() -> RuleGroup:
    """Per-GPU derived series."""
    return RuleGroup(
        "gpu-exporter-recording-gpu",
        (
            RecordingRule(GPU_MEMORY_RATIO, f"{used} / {total}"),
            RecordingRule(
                "instance_gpu:gpu_power_usage:ratio",
                f"{metrics.POWER_USAGE.name} / {metrics.POWER_LIMIT.name}",
            ),
        ),
    )


def instance_group() -> RuleGroup:
    """Per host (scrape target)."""
    rules = (
        RecordingRule(INSTANCE_MEMORY_USED, f"sum without ({_GPU}) ({used})"),
        RecordingRule(INSTANCE_MEMORY_TOTAL, f"sum without ({_GPU}) ({total})"),
        RecordingRule(
            INSTANCE_MEMORY_RATIO, f"{INSTANCE_MEMORY_USED} / {INSTANCE_MEMORY_TOTAL}"
        ),
        RecordingRule(INSTANCE_UTILIZATION, f"avg without ({_GPU}) ({metrics.UTILIZATION.name})"),
        RecordingRule(INSTANCE_SM_ACTIVE, f"avg without ({_GPU}) ({metrics.SM_ACTIVE.name})"),
        RecordingRule(INSTANCE_POWER, f"sum without ({_GPU}) ({metrics.POWER_USAGE.name})"),
        RecordingRule(INSTANCE_TEMPERATURE, f"max without ({_GPU}) ({metrics.TEMPERATURE.name})"),
        RecordingRule(INSTANCE_GPUS_UP, f"sum without ({_GPU}) ({metrics.GPU_UP.name})"),
        RecordingRule(INSTANCE_GPUS, f"count without ({_GPU}) ({metrics.GPU_UP.name})"),
        RecordingRule(INSTANCE_USER_MEMORY, f"sum without ({_GPU}) ({metrics.USER_MEMORY.name})"),
        RecordingRule(
            INSTANCE_OVERFLOW, f"sum without ({_GPU}) ({metrics.PROCESS_SERIES_OVERFLOW.name})"
        ),
        # gpu_info's hostname per scrape target: the dashboards' label join reads one series
        # per node instead of one per GPU.
        RecordingRule(HOSTNAME_RECORD,
                      f"max by (job, instance, hostname) ({metrics.GPU_INFO.name})"),
    )
    return RuleGroup("gpu-exporter-recording-instance", rules)


def fleet_group() -> RuleGroup:
    """Per scrape job: the whole fleet."""
    rules = (
        RecordingRule(f"job:{used}:sum", f"sum by (job) ({used})"),
        RecordingRule(f"job:{total}:sum", f"sum by (job) ({total})"),
        RecordingRule("job:gpu_memory_used:ratio", f"job:{used}:sum / job:{total}:sum"),
        RecordingRule(f"job:{metrics.GPU_UP.name}:sum", f"sum by (job) ({metrics.GPU_UP.name})"),
        RecordingRule("job:gpus:count", f"count by (job) ({metrics.GPU_UP.name})"),
        RecordingRule(
            f"job_user:{metrics.USER_MEMORY.name}:sum",
            f"sum by (job, user) ({metrics.USER_MEMORY.name})",
        ),
    )
    return RuleGroup("gpu-exporter-recording-fleet", rules)


def workload_memory_rules(kind: WorkloadKind) -> tuple[RecordingRule, ...]:
    """The memory of a workload kind's processes per workload (its ``group_by`` labels), then
    per each shorter prefix of them (per namespace for pods); none without ``group_by``."""
    keys, memory = kind.group_by, metrics.WORKLOAD_MEMORY.name
    if not keys:
        return ()
    others = [label for label in label_names(KINDS) if label not in keys]
    record = f"{'_'.join(keys)}:{memory}:sum"
    selector = sel(metrics.WORKLOAD_MEMORY, f'{keys[-1]}!=""')
    rules = [RecordingRule(record, f"sum without ({', '.join([_GPU, *others])}) ({selector})")]
    for size in range(len(keys) - 1, 0, -1):
        shorter = f"{'_'.join(keys[:size])}:{memory}:sum"
        rules.append(RecordingRule(shorter, f"sum without ({keys[size]}) ({record})"))
        record = shorter
    return tuple(rules)


def workload_group() -> RuleGroup:
    """Per namespace and pod (Kubernetes allocations), and each workload kind's memory per
    workload (per pod, per Slurm job).

    Device metrics (memory, utilisation, power) go to a pod only for whole GPUs one container
    owns alone (``sharing="exclusive"``): a shared GPU's numbers are not split. Memory of
    processes is exact on shared GPUs too (the driver accounts it per process).
    """
    rules = (
        RecordingRule(f"namespace_pod:{used}:sum",
                      f"sum without ({_GPU}, container) ({owned(metrics.MEMORY_USED, '')})"),
        RecordingRule(f"namespace_pod:{total}:sum",
                      f"sum without ({_GPU}, container) ({owned(metrics.MEMORY_TOTAL, '')})"),
        RecordingRule(POD_UTILIZATION,
                      f"avg without ({_GPU}, container) ({owned(metrics.UTILIZATION, '')})"),
        RecordingRule(POD_POWER,
                      f"sum without ({_GPU}, container) ({owned(metrics.POWER_USAGE, '')})"),
        RecordingRule(f"namespace:{used}:sum", f"sum without (pod) (namespace_pod:{used}:sum)"),
        RecordingRule(f"namespace:{metrics.POWER_USAGE.name}:sum",
                      f"sum without (pod) ({POD_POWER})"),
        RecordingRule("namespace_pod:gpu_allocated:count",
                      f"count without ({_GPU}, device_id, gpu_instance, resource, container, "
                      f"sharing, {', '.join(SLURM.allocation_labels)}) "
                      f"({sel(metrics.ALLOCATION_INFO, POD_ALLOCATION)})"),
        *(rule for kind in KINDS for rule in workload_memory_rules(kind)),
    )
    return RuleGroup("gpu-exporter-recording-workloads", rules)


def groups() -> tuple[RuleGroup, ...]:
    """Every recording group, in file order."""
    return (gpu_group(), instance_group(), fleet_group(), workload_group())


def all_records() -> tuple[RecordingRule, ...]:
    """Every recording rule across the groups."""
    return tuple(r for g in groups() for r in g.rules if isinstance(r, RecordingRule))
