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

- ``nvmlDeviceGetTotalEccErrors(h, errorType, counterType)``: ``NVML_VOLATILE_ECC`` counts are
  "reset each time the driver loads", ``NVML_AGGREGATE_ECC`` ones "persist across reboots (i.e.
  for the lifetime of the device)"; NOT_SUPPORTED with ECC mode off.

Every call goes through ``GpuReader.call``: unsupported fields are asked once, a lost GPU
abandons the reading, other failures leave the value out.
"""

from __future__ import annotations

import time

from exporter.catalogue.metrics import (
    ECC_AGGREGATE,
    ECC_ERRORS,
    REMAP_FAILURE,
    REMAP_PENDING,
    REMAPPED_ROWS,
    RETIRED_PAGES,
    RETIRED_PENDING,
    Constant,
    Value,
)
from exporter.sources.nvml.device import EccRead, FieldCalls, GpuState

RETIRED_SINGLE_BIT = Constant("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0)
RETIRED_DOUBLE_BIT = Constant("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1)
ECC_FUNCTION = "nvmlDeviceGetTotalEccErrors"
#: Its error types (corrected, uncorrected) and counters (volatile, aggregate).
ECC_ARGUMENTS = (Constant("NVML_MEMORY_ERROR_TYPE_CORRECTED", 0),
                 Constant("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
                 Constant("NVML_VOLATILE_ECC", 0), Constant("NVML_AGGREGATE_ECC", 1))
#: Seconds the lifetime ECC counts are reused at most while the volatile ones stay the same.
LIFETIME_ECC_REUSE_SECONDS = 60.0


def read_remapped_rows(reader: FieldCalls, gpu: GpuState) -> dict[str, Value]:
    """Remapped rows by type, and the pending / failure flags."""
    rows = reader.call(gpu, "remapped_rows", reader.binding.function("nvmlDeviceGetRemappedRows"))
    if rows is None:
        return {}
    corrected, uncorrected, pending, failure = (int(v) for v in rows)
    return {REMAPPED_ROWS.name: {"corrected": corrected, "uncorrected": uncorrected},
            REMAP_PENDING.name: float(bool(pending)), REMAP_FAILURE.name: float(bool(failure))}


def read_retired_pages(reader: FieldCalls, gpu: GpuState) -> dict[str, Value]:
    """Retired pages by cause, and whether more wait for a reset."""
    binding = reader.binding
    pages = binding.function("nvmlDeviceGetRetiredPages")
    single = reader.call(gpu, "retired_pages", pages, binding.argument(RETIRED_SINGLE_BIT))
    if single is None:
        return {}
    double = reader.call(gpu, "retired_pages", pages, binding.argument(RETIRED_DOUBLE_BIT))
    if double is None:
        return {}
    values: dict[str, Value] = {RETIRED_PAGES.name: {"single_bit": len(single),
                                                     "double_bit": len(double)}}
    pending = reader.call(gpu, "retired_pages_pending",
                          binding.function("nvmlDeviceGetRetiredPagesPendingStatus"))
    if pending is not None:
        values[RETIRED_PENDING.name] = float(bool(pending))
    return values



def read_ecc(reader: FieldCalls, gpu: GpuState) -> dict[str, Value]:
    """ECC errors by type since the driver loaded (volatile) and over the GPU's life (aggregate).

    Every error the lifetime counters count, the volatile ones count too: while the volatile
    counts stay the same, so do the lifetime ones. They are read again only when the volatile
    counts changed or one of the four reads failed, and at least every minute in case a driver
    persists them late; otherwise the last values are reused. An idle GPU's collection makes
    two of the four calls.
    """
    binding = reader.binding
    function = binding.function(ECC_FUNCTION)
    corrected, uncorrected, volatile, aggregate = binding.arguments("ecc", ECC_ARGUMENTS)
    since_load = (reader.call(gpu, ECC_FUNCTION, function, corrected, volatile),
                  reader.call(gpu, ECC_FUNCTION, function, uncorrected, volatile))
    now = time.monotonic()
    seen = gpu.ecc_read
    if (seen is not None and seen.volatile == since_load
            and now - seen.at < LIFETIME_ECC_REUSE_SECONDS):
        return seen.values
    lifetime = (reader.call(gpu, ECC_FUNCTION, function, corrected, aggregate),
                reader.call(gpu, ECC_FUNCTION, function, uncorrected, aggregate))
    values: dict[str, Value] = {}
    for name, (corrected_count, uncorrected_count) in ((ECC_ERRORS.name, since_load),
                                                       (ECC_AGGREGATE.name, lifetime)):
        by_type = {}
        if corrected_count is not None:
            by_type["corrected"] = corrected_count
        if uncorrected_count is not None:
            by_type["uncorrected"] = uncorrected_count
        if by_type:
            values[name] = by_type
    gpu.ecc_read = (EccRead(since_load, now, values) if None not in since_load + lifetime
                    else None)
    return values
