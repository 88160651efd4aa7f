"""GPU memory health through NVML: row remapping, retired pages, lifetime (aggregate) ECC counts.

NVML calls and the behaviour relied on (nvml.h; GPU Memory Error Management guide):

- ``nvmlDeviceGetRemappedRows(h)`` -> ``(corrected, uncorrected, isPending, failureOccurred)``
  (Ampere or newer). "isPending indicates whether or not there are pending remappings. A reset
  will be required to actually remap the row. failureOccurred will be set if a row remapping
  ever failed in the past." NOT_SUPPORTED "if MIG is enabled or if the device doesn't support
  this feature". The H200 answers ``(0, 0, 0, 0)``.
- ``nvmlDeviceGetRetiredPages(h, cause)`` (addresses) for
  ``NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS`` (0) and ``..._DOUBLE_BIT_ECC_ERROR``
  (1), and ``nvmlDeviceGetRetiredPagesPendingStatus(h)`` ("pages pending retirement and need a
  reboot"): GPUs before Ampere. NOT_SUPPORTED on Hopper (measured on the H200), then never asked
  again.
- ``nvmlDeviceGetTotalEccErrors(h, type, NVML_AGGREGATE_ECC)``: counts that "persist across
  reboots (i.e. for the lifetime of the device)", where the volatile ones reset with the driver.
  NOT_SUPPORTED without ECC mode.

Every call goes through the NVML source's per-GPU guard (``call``), so unsupported fields are
asked for once, a lost GPU abandons the reading and other failures leave the value ``None``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from exporter.health import MemoryHealth, RemappedRows, RetiredPages
from exporter.snapshot import EccCounts

#: ``call(name, fn, *args)``: ``fn(handle, *args)`` on the GPU being read, or None when the
#: field is unsupported or failed (``GpuReader.call`` bound to one GPU).
Call = Callable[..., Any]


class HealthCalls:
    """The binding's functions and constants for memory health, resolved once."""

    def __init__(self, nvml: ModuleType) -> None:
        self.remapped_rows = getattr(nvml, "nvmlDeviceGetRemappedRows", None)
        self.retired_pages = getattr(nvml, "nvmlDeviceGetRetiredPages", None)
        self.retired_pending = getattr(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", None)
        self.ecc = getattr(nvml, "nvmlDeviceGetTotalEccErrors", None)
        self.cause_sbe = getattr(
            nvml, "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0)
        self.cause_dbe = getattr(nvml, "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1)
        self.corrected = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
        self.uncorrected = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
        self.aggregate = getattr(nvml, "NVML_AGGREGATE_ECC", 1)


def read_memory_health(call: Call, c: HealthCalls) -> MemoryHealth:
    """Remapped rows, retired pages and lifetime ECC counts of one GPU.

    Raises:
        GpuDown, NvmlFatal: from ``call`` (the GPU or NVML stopped answering).
    """
    rows = call("remapped_rows", c.remapped_rows)
    remapped = None if rows is None else RemappedRows(
        corrected=int(rows[0]), uncorrected=int(rows[1]), pending=bool(rows[2]),
        failure=bool(rows[3]))
    retired: RetiredPages | None = None
    single = call("retired_pages", c.retired_pages, c.cause_sbe)
    if single is not None:
        double = call("retired_pages", c.retired_pages, c.cause_dbe)
        if double is not None:
            pending = call("retired_pages_pending", c.retired_pending)
            retired = RetiredPages(single_bit=len(single), double_bit=len(double),
                                   pending=None if pending is None else bool(pending))
    lifetime: EccCounts | None = None
    corrected = call("ecc_aggregate", c.ecc, c.corrected, c.aggregate)
    if corrected is not None:
        uncorrected = call("ecc_aggregate", c.ecc, c.uncorrected, c.aggregate)
        if uncorrected is not None:
            lifetime = EccCounts(corrected=int(corrected), uncorrected=int(uncorrected))
    return MemoryHealth(remapped_rows=remapped, retired_pages=retired, ecc_lifetime=lifetime)
