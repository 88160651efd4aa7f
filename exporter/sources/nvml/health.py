"""GPU memory health through NVML (``NvmlSpecial`` readers): row remapping and retired pages.

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

The lifetime ECC counts (``nvmlDeviceGetTotalEccErrors(..., NVML_AGGREGATE_ECC)``) are a plain
row (``exporter.metrics.ECC_AGGREGATE``). Every call goes through ``GpuReader.call``: unsupported
fields are asked once, a lost GPU abandons the reading, other failures leave the value out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.metrics import (
    REMAP_FAILURE,
    REMAP_PENDING,
    REMAPPED_ROWS,
    RETIRED_PAGES,
    RETIRED_PENDING,
    Constant,
)
from exporter.snapshot import Value

if TYPE_CHECKING:
    from exporter.sources.nvml.reader import GpuReader, GpuState

RETIRED_SINGLE_BIT = Constant("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0)
RETIRED_DOUBLE_BIT = Constant("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1)


def read_remapped_rows(reader: GpuReader, gpu: GpuState) -> dict[str, Value]:
    """Remapped rows by type, and the pending / failure flags."""
    rows = reader.call(gpu, "remapped_rows", reader.calls.function("nvmlDeviceGetRemappedRows"))
    if rows is None:
        return {}
    corrected, uncorrected, pending, failure = (int(v) for v in rows)
    return {REMAPPED_ROWS.name: {"corrected": corrected, "uncorrected": uncorrected},
            REMAP_PENDING.name: float(bool(pending)), REMAP_FAILURE.name: float(bool(failure))}


def read_retired_pages(reader: GpuReader, gpu: GpuState) -> dict[str, Value]:
    """Retired pages by cause, and whether more wait for a reset."""
    calls = reader.calls
    pages = calls.function("nvmlDeviceGetRetiredPages")
    single = reader.call(gpu, "retired_pages", pages, calls.argument(RETIRED_SINGLE_BIT))
    if single is None:
        return {}
    double = reader.call(gpu, "retired_pages", pages, calls.argument(RETIRED_DOUBLE_BIT))
    if double is None:
        return {}
    values: dict[str, Value] = {RETIRED_PAGES.name: {"single_bit": len(single),
                                                     "double_bit": len(double)}}
    pending = reader.call(gpu, "retired_pages_pending",
                          calls.function("nvmlDeviceGetRetiredPagesPendingStatus"))
    if pending is not None:
        values[RETIRED_PENDING.name] = float(bool(pending))
    return values

