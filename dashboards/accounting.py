"""Idle accounting: recording rules for GPU time and memory held while idle (issue 12).

One group runs every ``records.INTERVAL`` (1m) and records, per interval, rates that a range
total only has to sum (``sum_over_time(r[7d]) * 60``): the report and the efficiency dashboard
never touch raw per-process samples over long ranges.

Definitions (the idle threshold is ``thresholds.IDLE_UTILIZATION_RATIO``, shared with alerts):

- A process is **idle** in an interval when its SM utilisation averaged over the interval is
  under the threshold. It then holds its memory idle (``idle_memory_bytes``).
- A GPU is **held** by its processes in proportion to the memory each holds (``held_gpus``:
  shares of one GPU summing to 1); it is **held idle** when its own utilisation averaged over
  the interval is under the threshold (``idle_gpus``: the idle processes' shares). A process
  idle on a GPU that a neighbour keeps busy wastes memory, not the GPU.
- **Used** GPUs are the processes' own SM utilisation (``used_gpus``), so held minus used is
  what was paid for and not used.
- **Power** per user is the GPU's average power over the interval (from the energy counter's
  rate where the energy collector is on, which survives counter resets, else the power gauge),
  split by the users' shares of SM utilisation on that GPU, or by memory when nothing ran.

Each quantity is recorded per user, per namespace/pod (processes with a pod) and per batch
job (processes with ``records.JOB_LABEL``); target labels (instance, node, ...) are kept.
One per-process series is recorded, only while the process is idle
(``process:gpu_idle_memory_bytes:1m``), for the report's list of forgotten processes; GPU shares
are summed per GPU and row before dividing, so no other rule writes per-process series.
"""

from __future__ import annotations

from collections.abc import Sequence

from dashboards.promql import num
from dashboards.rules import RecordingRule, RuleGroup
from exporter import metrics, thresholds
from exporter.report import records

#: Labels that tell processes on one GPU apart (everything a process series has beyond the
#: GPU's labels and the target's).
PROCESS_ONLY = tuple(dict.fromkeys(
    ("pid", "process", "uid", "user", *metrics.KUBERNETES_LABELS, *metrics.CONTAINER_LABELS,
     records.JOB_LABEL)))
_WINDOW = f"[{records.INTERVAL}]"
_IDLE = num(thresholds.IDLE_UTILIZATION_RATIO)


def _csv(labels: Sequence[str]) -> str:
    return ", ".join(labels)


def _drop(level: records.Level) -> str:
    """The ``without (...)`` list that aggregates process series to ``level``."""
    return _csv([x for x in (*metrics.GPU_LABELS, *PROCESS_ONLY) if x not in level.keeps])


def _only(level: records.Level) -> str:
    """Matchers keeping series that have the level's labels (pods, jobs; users always)."""
    return ", ".join(f'{label}!=""' for label in level.keeps if label != "user")


def _sel(name: str, matchers: str) -> str:
    return f"{name}{{{matchers}}}" if matchers else name


#: Memory held by all processes of a GPU, from the per-user series (one per user and GPU:
#: far fewer than the process series; a GPU's user sums add up to its process sum).
PER_GPU_MEMORY = f"sum without (user) ({metrics.USER_MEMORY.name}) > 0"


def _process_rules() -> list[RecordingRule]:
    mem, util = metrics.PROCESS_MEMORY.name, metrics.PROCESS_UTILIZATION.name
    not_user = _csv([x for x in PROCESS_ONLY if x != "user"])
    return [
        RecordingRule(
            records.PROCESS_IDLE_MEMORY,
            f"{mem}\nand avg_over_time({util}{_WINDOW}) < {_IDLE}\n",
        ),
        RecordingRule(
            records.GPU_USER_USED,
            f"sum without ({not_user}) (avg_over_time({util}{_WINDOW}))",
        ),
    ]


def _idle_gpus(level: records.Level) -> str:
    """Shares of idle GPUs held by idle processes, summed at ``level``.

    A process's share is its memory over its GPU's; summed per GPU first (one series per GPU
    and row of the level, not per process), the share is the row's idle memory over the GPU's,
    kept where the GPU itself idled over the interval. No per-process series is written.
    """
    keeps = _csv(level.keeps)
    not_kept = _csv([x for x in PROCESS_ONLY if x not in level.keeps])
    per_gpu = f"sum without ({not_kept}) ({_sel(records.PROCESS_IDLE_MEMORY, _only(level))})"
    return (
        f"sum without ({_csv(metrics.GPU_LABELS)}) (\n"
        f"  {per_gpu}\n"
        f"  / ignoring ({keeps}) group_left () ({PER_GPU_MEMORY})\n"
        f"  and ignoring ({keeps})\n"
        f"  avg_over_time({metrics.UTILIZATION.name}{_WINDOW}) < {_IDLE}\n"
        ")"
    )


def _level_rules(level: records.Level) -> list[RecordingRule]:
    only = _only(level)
    drop = _drop(level)
    mem, util = metrics.PROCESS_MEMORY.name, metrics.PROCESS_UTILIZATION.name
    exprs = {
        records.IDLE_MEMORY: f"sum without ({drop}) ({_sel(records.PROCESS_IDLE_MEMORY, only)})",
        records.IDLE_GPUS: _idle_gpus(level),
        records.HELD_MEMORY: f"sum without ({drop}) ({_sel(mem, only)})",
        records.HELD_GPUS: (
            f"sum without ({drop}) (\n"
            f"  {_sel(mem, only)}\n"
            f"  / ignoring ({_csv(PROCESS_ONLY)}) group_left () ({PER_GPU_MEMORY})\n)"
        ),
        records.USED_GPUS: f"sum without ({drop}) (avg_over_time({_sel(util, only)}{_WINDOW}))",
    }
    if level is records.USER:
        # Cheaper per-user series for memory held (one per user and GPU, not per process).
        user_mem = metrics.USER_MEMORY.name
        gpus = _csv(metrics.GPU_LABELS)
        exprs[records.HELD_MEMORY] = f"sum without ({gpus}) ({user_mem})"
        exprs[records.HELD_GPUS] = (
            f"sum without ({gpus}) (\n"
            f"  {user_mem}\n"
            f"  / ignoring (user) group_left () (sum without (user) ({user_mem}) > 0)\n)"
        )
        exprs[records.USED_GPUS] = f"sum without ({gpus}) ({records.GPU_USER_USED})"
        exprs[records.POWER] = _power_rule()
    return [RecordingRule(level.record(q), exprs[q]) for q in records.level_quantities(level)]


def _power_rule() -> str:
    """Per user: each GPU's average power, split by SM-utilisation share (memory share if idle)."""
    gpus = _csv(metrics.GPU_LABELS)
    util = records.GPU_USER_USED
    user_mem = metrics.USER_MEMORY.name
    watts = (
        f"rate({metrics.ENERGY.name}[{2 * records.INTERVAL_SECONDS}s])\n"
        f"  or avg_over_time({metrics.POWER_USAGE.name}{_WINDOW})"
    )
    return (
        f"sum without ({gpus}) (\n"
        f"  (\n"
        f"    {util}\n"
        f"    / ignoring (user) group_left () (sum without (user) ({util}) > 0)\n"
        f"    or\n"
        f"    {user_mem}\n"
        f"    / ignoring (user) group_left () (sum without (user) ({user_mem}) > 0)\n"
        f"  )\n"
        f"  * ignoring (user) group_left () (\n  {watts}\n  )\n"
        f")"
    )


def groups() -> tuple[RuleGroup, ...]:
    """The accounting group (one group: later rules read earlier ones of the same run)."""
    rules = _process_rules()
    for level in records.LEVELS:
        rules.extend(_level_rules(level))
    return (RuleGroup(records.GROUP, tuple(rules), interval=records.INTERVAL),)


def all_records() -> tuple[RecordingRule, ...]:
    """Every accounting recording rule."""
    return tuple(rule for g in groups() for rule in g.rules if isinstance(rule, RecordingRule))
