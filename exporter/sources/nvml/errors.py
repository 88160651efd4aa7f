"""How the NVML source reacts to each NVML return code.

nvidia-ml-py raises ``NVMLError`` subclasses whose ``value`` is the C return code; unversioned
wrappers raise ``NVMLLibraryMismatchError`` when the driver lacks the newest symbol. Codes fall
into four reactions:

- unsupported: remember per (GPU, field) and stop asking (the field stays ``None``);
- GPU down: that GPU is reported ``up=False`` and its handle is re-acquired next collection;
- fatal: the library itself is gone (uninitialised, driver unloaded or upgraded underneath us);
  when every GPU answers so, the source raises ``SourceUnavailable`` so the scheduler re-inits;
- anything else: transient, the field is ``None`` this time and ``errors["nvml_call"]`` counts it.
"""

from __future__ import annotations

from enum import Enum
from typing import Final

# Return codes from nvml.h (the same numbers as pynvml's NVML_ERROR_* constants).
NVML_SUCCESS: Final = 0
UNINITIALIZED: Final = 1
NOT_SUPPORTED: Final = 3
NO_PERMISSION: Final = 4
NOT_FOUND: Final = 6
INSUFFICIENT_SIZE: Final = 7
DRIVER_NOT_LOADED: Final = 9
LIBRARY_NOT_FOUND: Final = 12
FUNCTION_NOT_FOUND: Final = 13
GPU_IS_LOST: Final = 15
RESET_REQUIRED: Final = 16
LIB_RM_VERSION_MISMATCH: Final = 18
ARGUMENT_VERSION_MISMATCH: Final = 25
DEPRECATED: Final = 26
GPU_NOT_FOUND: Final = 28
UNKNOWN: Final = 999


class Reaction(Enum):
    """What the source does about one failed NVML call."""

    UNSUPPORTED = "unsupported"
    GPU_DOWN = "gpu_down"
    FATAL = "fatal"
    TRANSIENT = "transient"


#: Codes meaning "this GPU/driver cannot answer this question": asking again is pointless.
UNSUPPORTED_CODES: Final = frozenset(
    {NOT_SUPPORTED, FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH, DEPRECATED}
)
#: Codes meaning the GPU itself is unreachable, with the error kind each one is counted under.
GPU_DOWN_KINDS: Final = {
    GPU_IS_LOST: "gpu_lost",
    GPU_NOT_FOUND: "gpu_lost",
    RESET_REQUIRED: "gpu_reset_required",
    UNKNOWN: "gpu_unknown_error",
}
#: Codes meaning the NVML library as a whole stopped working.
FATAL_CODES: Final = frozenset(
    {UNINITIALIZED, DRIVER_NOT_LOADED, LIB_RM_VERSION_MISMATCH, LIBRARY_NOT_FOUND}
)


def reaction_for(code: int | None) -> Reaction:
    """Classify an NVML return code (``None``: a binding/driver symbol mismatch)."""
    if code is None or code in UNSUPPORTED_CODES:
        return Reaction.UNSUPPORTED
    if code in GPU_DOWN_KINDS:
        return Reaction.GPU_DOWN
    if code in FATAL_CODES:
        return Reaction.FATAL
    return Reaction.TRANSIENT


def describe(exc: BaseException) -> str:
    """A user-facing text for an NVML exception: its message plus the numeric code."""
    code = getattr(exc, "value", None)
    text = str(exc) or type(exc).__name__
    return f"{text} (NVML error {code})" if isinstance(code, int) else text


class GpuDown(Exception):
    """Raised inside a GPU read when the GPU stopped answering; the read is abandoned."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class NvmlFatal(Exception):
    """Raised inside a GPU read when NVML itself stopped working (see ``FATAL_CODES``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def raise_if_down(exc: BaseException) -> Reaction:
    """Raise ``GpuDown`` or ``NvmlFatal`` when a failed NVML call means the GPU or NVML is
    gone; otherwise the reaction to it (an exception without an int code: ``TRANSIENT``)."""
    code = getattr(exc, "value", None)
    if not isinstance(code, int):
        return Reaction.TRANSIENT
    reaction = reaction_for(code)
    if reaction is Reaction.GPU_DOWN:
        raise GpuDown(GPU_DOWN_KINDS[code], describe(exc)) from exc
    if reaction is Reaction.FATAL:
        raise NvmlFatal(describe(exc)) from exc
    return reaction
