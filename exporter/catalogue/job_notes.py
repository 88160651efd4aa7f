"""The notes a per-job (per-pod) summary prints for a GPU, each with its threshold: one table.

``gpu-exporter report job`` (``exporter.report.jobs``) works out per GPU the figures named by
the ``*_KEY`` constants below (means and peaks over the time the job held the GPU) and prints
the text of every note whose ``applies`` holds, formatted with those figures. A figure that
could not be measured (no GPM, no PyTorch publisher) is absent, and a note needing it does
not apply. The thresholds are constants of ``exporter.catalogue.thresholds``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from exporter.catalogue import thresholds as t

__all__ = ["NOTES", "JobNote", "notes_for"]

#: Figures of one GPU of a job: ratios 0-1 (means over the time held), seconds.
UTILIZATION_KEY: Final = "utilization_ratio"
SM_ACTIVE_KEY: Final = "sm_active_ratio"
TENSOR_ACTIVE_KEY: Final = "tensor_active_ratio"
FP32_PIPE_KEY: Final = "fp32_pipe_active_ratio"
MEMORY_PEAK_SHARE_KEY: Final = "memory_peak_share"  # the job's peak memory / the GPU's total
HELD_KEY: Final = "held_seconds"
IDLE_KEY: Final = "idle_seconds"

Figures = Mapping[str, float]


@dataclass(frozen=True, slots=True)
class JobNote:
    """One note: when it applies (a test of the figures) and what it says (``str.format``
    with the figures and ``idle_share``)."""

    name: str
    text: str
    applies: Callable[[Figures], bool]


def _below(key: str, limit: float) -> Callable[[Figures], bool]:
    return lambda figures: key in figures and figures[key] < limit


def _idle_share(figures: Figures) -> float:
    held = figures.get(HELD_KEY, 0.0)
    return figures.get(IDLE_KEY, 0.0) / held if held > 0 else 0.0


def _fp32_without_tensor_cores(figures: Figures) -> bool:
    if SM_ACTIVE_KEY not in figures or TENSOR_ACTIVE_KEY not in figures:
        return False
    return (figures[SM_ACTIVE_KEY] >= t.TENSOR_UNUSED_SM_RATIO
            and figures[TENSOR_ACTIVE_KEY] < t.TENSOR_UNUSED_RATIO
            and figures.get(FP32_PIPE_KEY, t.JOB_FP32_PIPE_RATIO) >= t.JOB_FP32_PIPE_RATIO)


NOTES: tuple[JobNote, ...] = (
    JobNote("idle", "held without use {idle_share:.0%} of the time (no process of the job on "
            f"it, or under {t.IDLE_UTILIZATION_RATIO:.0%} activity): release GPUs the job "
            "does not use (ask for fewer, end interactive sessions).",
            lambda figures: _idle_share(figures) > t.JOB_IDLE_SHARE),
    JobNote("low_utilization", "utilisation averaged {utilization_ratio:.0%}, under "
            f"{t.JOB_LOW_UTILIZATION_RATIO:.0%}: the GPU mostly waited (data loading, CPU "
            "work, a small batch); profile a step, or run on fewer GPUs.",
            _below(UTILIZATION_KEY, t.JOB_LOW_UTILIZATION_RATIO)),
    JobNote("small_memory", "peak memory {memory_peak_share:.0%} of the GPU's, under "
            f"{t.JOB_SMALL_MEMORY_RATIO:.0%}: a smaller GPU or a MIG slice would do.",
            _below(MEMORY_PEAK_SHARE_KEY, t.JOB_SMALL_MEMORY_RATIO)),
    JobNote("fp32", "SMs busy {sm_active_ratio:.0%} but tensor cores {tensor_active_ratio:.0%}: "
            "the math runs in FP32; try bf16/TF32 (torch.autocast, "
            "torch.backends.cuda.matmul.allow_tf32 = True).", _fp32_without_tensor_cores),
)


def notes_for(figures: Figures) -> list[str]:
    """The texts of the notes that apply to one GPU's ``figures``, in table order (only the
    first, the idle one, for a GPU held idle nearly all the time)."""
    values = {**figures, "idle_share": _idle_share(figures)}
    found = [note.text.format(**values) for note in NOTES if note.applies(figures)]
    return found[:1] if values["idle_share"] >= t.JOB_MOSTLY_IDLE_SHARE else found
