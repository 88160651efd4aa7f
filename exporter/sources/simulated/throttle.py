"""Time a simulated GPU's clocks were held back, per reason, integrated exactly.

Between two process starts or exits a GPU's load is constant, so over such a segment it is
either power-capped (and not idle) the whole time or not at all, and its temperature follows
``goal + (start - goal) * exp(-s / tau)``: the time it spends above a slowdown threshold has a
closed form. ``GpuTimeline`` adds each segment's times up as it advances, so the counters are a
function of the simulated time alone, whatever the collection interval.
"""

from __future__ import annotations

import math
from typing import NamedTuple

#: Below this share of work the driver reports the GPU idle (``gpu_idle``).
IDLE_LOAD = 0.02
#: Demand at this share of the limit or more holds the power at the cap.
CAP_SHARE = 0.98


class ThrottleTimes(NamedTuple):
    """Seconds per reason since the driver loaded (the simulated GPU's counters)."""

    capped: float = 0.0  # at the power cap while working: sw_power_cap
    idle: float = 0.0  # no work: low_utilization
    sw_hot: float = 0.0  # above the software slowdown temperature
    hw_hot: float = 0.0  # above the hardware slowdown temperature
    below: float = 0.0  # clocks below the application (and base) clocks: capped or hot

    def plus(self, other: ThrottleTimes) -> ThrottleTimes:
        return ThrottleTimes(*(a + b for a, b in zip(self, other, strict=True)))


def time_above(threshold: float, start: float, goal: float, tau: float, length: float) -> float:
    """Seconds of ``[0, length]`` in which ``goal + (start - goal) e^(-s/tau)`` is at or above
    ``threshold`` (a first-order approach from ``start`` to ``goal``)."""
    if length <= 0.0:
        return 0.0
    above_start, above_goal = start >= threshold, goal >= threshold
    if above_start and above_goal:
        return length
    if not above_start and not above_goal:
        return 0.0
    crossing = tau * math.log((start - goal) / (threshold - goal))  # when it crosses
    return max(0.0, length - crossing) if above_goal else min(length, crossing)


def segment(length: float, load: float, capped: bool, *, start: float, goal: float,
            tau: float, slowdown: float, hw_slowdown: float) -> ThrottleTimes:
    """The times one constant-load segment of ``length`` seconds adds."""
    if length <= 0.0:
        return ThrottleTimes()
    idle = load < IDLE_LOAD
    working_capped = capped and not idle
    sw_hot = time_above(slowdown, start, goal, tau, length)
    return ThrottleTimes(
        capped=length if working_capped else 0.0,
        idle=length if idle else 0.0,
        sw_hot=sw_hot,
        hw_hot=time_above(hw_slowdown, start, goal, tau, length),
        below=length if working_capped else sw_hot,
    )
