"""Field values, violation status and minor numbers of the fake ``pynvml``: see
``tests.sources.fake_nvml``.

A fake GPU answers the throttle-time fields as the H100 measured with the driver 580 did
(idle: power, low utilisation and the two "below clocks" counters non-zero, the rest 0), and,
with ``nvlink``, the NVLink fields of its ``nvlink_links`` links (link count, per-link
CRC / replay / recovery counts with the link as scope, state active, and the per-link CRC-data
fields of links 0-11). ``gpu.fields`` adds or
overrides entries, ``gpu.field_errors`` makes one entry answer a code; anything else answers
NOT_SUPPORTED in its own ``nvmlReturn``, as NVML does.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.sources.fake_nvml_parts import FakeGpu, FakeHandle

NOT_SUPPORTED = 3
INVALID_ARGUMENT = 2
#: Throttle-time fields as an idle H100 answered them (ns since the driver loaded).
H100_THROTTLE_NS: dict[int, int] = {
    74: 28_100_000_000, 75: 0, 76: 0, 77: 0, 78: 23_750_000_000, 79: 0,
    80: 42_100_000_000, 81: 41_700_000_000, 269: 0, 270: 0, 271: 0,
}
#: nvmlValueType_t: unsigned int, unsigned long long.
UINT, ULONGLONG = 1, 3


def _crc_data_link(field_id: int) -> int | None:
    """The link of a per-link CRC-data field (39-44: links 0-5, 102-107: links 6-11)."""
    if 39 <= field_id <= 44:
        return field_id - 39
    if 102 <= field_id <= 107:
        return field_id - 96
    return None


def _answer(gpu: FakeGpu, field_id: int, scope: int) -> tuple[int, float, int]:
    """(nvmlReturn, value, value type) of one entry."""
    key = (field_id, scope)
    if key in gpu.field_errors:
        return gpu.field_errors[key], 0.0, ULONGLONG
    if key in gpu.fields:
        return 0, gpu.fields[key], ULONGLONG
    if scope == 0 and field_id in H100_THROTTLE_NS:
        return 0, H100_THROTTLE_NS[field_id], ULONGLONG
    if gpu.nvlink:
        if key == (91, 0):
            return 0, gpu.nvlink_links, UINT
        if field_id in (161, 162, 163, 165):
            if scope >= gpu.nvlink_links:
                return INVALID_ARGUMENT, 0.0, UINT
            return 0, 1 if field_id == 165 else 0, UINT if field_id == 165 else ULONGLONG
        link = _crc_data_link(field_id)
        if scope == 0 and link is not None and link < gpu.nvlink_links:
            return 0, 0, ULONGLONG
    return NOT_SUPPORTED, 0.0, ULONGLONG


class FakeFields:
    """The field-value functions, mixed into ``FakeNvml``."""

    NVML_PERF_POLICY_POWER = 0
    NVML_PERF_POLICY_THERMAL = 1

    def _enter(self, symbol: str, handle: Any = None) -> FakeGpu:
        raise NotImplementedError

    def _raise(self, code: int) -> None:
        raise NotImplementedError

    #: Every field-value request: (GPU index, [(field id, scope), ...]).
    field_requests: list[tuple[int, list[tuple[int, int]]]]

    def nvmlDeviceGetFieldValues(self, h: FakeHandle, field_ids: list[Any]) -> list[Any]:
        gpu = self._enter("nvmlDeviceGetFieldValues", h)
        self.field_requests.append((h.index, [
            requested if isinstance(requested, tuple) else (requested, 0)
            for requested in field_ids]))
        answers = []
        for requested in field_ids:
            field_id, scope = requested if isinstance(requested, tuple) else (requested, 0)
            code, value, value_type = _answer(gpu, field_id, scope)
            member = "uiVal" if value_type == UINT else "ullVal"
            answers.append(types.SimpleNamespace(
                fieldId=field_id, scopeId=scope, timestamp=0, latencyUsec=0,
                valueType=value_type, nvmlReturn=code,
                value=types.SimpleNamespace(**{member: int(value) if code == 0 else 0})))
        return answers

    def nvmlDeviceGetViolationStatus(self, h: FakeHandle, policy: int) -> Any:
        gpu = self._enter("nvmlDeviceGetViolationStatus", h)
        if policy not in gpu.violations:
            self._raise(NOT_SUPPORTED)
        return types.SimpleNamespace(referenceTime=1_700_000_000_000_000,
                                     violationTime=gpu.violations[policy])

    def nvmlDeviceGetMinorNumber(self, h: FakeHandle) -> int:
        gpu = self._enter("nvmlDeviceGetMinorNumber", h)
        if gpu.minor is None:
            self._raise(NOT_SUPPORTED)
        assert gpu.minor is not None
        return gpu.minor
