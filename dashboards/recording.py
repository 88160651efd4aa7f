"""Recording rules for fleet aggregates, named ``level:metric:operations``.

Aggregations use ``without`` (keeping target labels such as ``node``) at the per-GPU and
per-instance levels, and ``by (job)`` at the fleet level; ratios divide separately aggregated
sums. Dashboards and alerts read raw metrics, so these groups are optional: load them for
cheaper long-range graphs and federation.
"""

from __future__ import annotations

from dashboards.rules import RecordingRule, RuleGroup
from exporter import metrics as c

_GPU = ", ".join(c.GPU_LABELS)
used, total = c.MEMORY_USED.name, c.MEMORY_TOTAL.name


def gpu_group() -> RuleGroup:
    """Per-GPU derived series."""
    return RuleGroup(
        "gpu-exporter-recording-gpu",
        (
            RecordingRule("instance_gpu:gpu_memory_used:ratio", f"{used} / {total}"),
            RecordingRule(
                "instance_gpu:gpu_power_usage:ratio",
                f"{c.POWER_USAGE.name} / {c.POWER_LIMIT.name}",
            ),
        ),
    )


def instance_group() -> RuleGroup:
    """Per host (scrape target)."""
    rules = (
        RecordingRule(f"instance:{used}:sum", f"sum without ({_GPU}) ({used})"),
        RecordingRule(f"instance:{total}:sum", f"sum without ({_GPU}) ({total})"),
        RecordingRule(
            "instance:gpu_memory_used:ratio",
            f"instance:{used}:sum / instance:{total}:sum",
        ),
        RecordingRule(
            f"instance:{c.UTILIZATION.name}:avg", f"avg without ({_GPU}) ({c.UTILIZATION.name})"
        ),
        RecordingRule(
            f"instance:{c.POWER_USAGE.name}:sum", f"sum without ({_GPU}) ({c.POWER_USAGE.name})"
        ),
        RecordingRule(f"instance:{c.GPU_UP.name}:sum", f"sum without ({_GPU}) ({c.GPU_UP.name})"),
        RecordingRule("instance:gpus:count", f"count without ({_GPU}) ({c.GPU_UP.name})"),
        RecordingRule(
            f"instance_user:{c.USER_MEMORY.name}:sum",
            f"sum without ({_GPU}) ({c.USER_MEMORY.name})",
        ),
    )
    return RuleGroup("gpu-exporter-recording-instance", rules)


def fleet_group() -> RuleGroup:
    """Per scrape job: the whole fleet."""
    rules = (
        RecordingRule(f"job:{used}:sum", f"sum by (job) ({used})"),
        RecordingRule(f"job:{total}:sum", f"sum by (job) ({total})"),
        RecordingRule("job:gpu_memory_used:ratio", f"job:{used}:sum / job:{total}:sum"),
        RecordingRule(f"job:{c.GPU_UP.name}:sum", f"sum by (job) ({c.GPU_UP.name})"),
        RecordingRule("job:gpus:count", f"count by (job) ({c.GPU_UP.name})"),
        RecordingRule(
            f"job_user:{c.USER_MEMORY.name}:sum", f"sum by (job, user) ({c.USER_MEMORY.name})"
        ),
    )
    return RuleGroup("gpu-exporter-recording-fleet", rules)


def groups() -> tuple[RuleGroup, ...]:
    """Every recording group, in file order."""
    return (gpu_group(), instance_group(), fleet_group())


def all_records() -> tuple[RecordingRule, ...]:
    """Every recording rule across the groups."""
    return tuple(r for g in groups() for r in g.rules if isinstance(r, RecordingRule))
