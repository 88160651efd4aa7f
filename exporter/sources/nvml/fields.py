"""The field-value rows (``NvmlFields``: throttle time, NVLink errors and state), read in one
``nvmlDeviceGetFieldValues`` call per GPU and collection.

Each value of a row names the fields that may answer it, newest first; the call asks for all
of them until the GPU has answered one, then only for that one (each field has its own
``nvmlReturn``). A value none of whose fields the GPU supports falls back to its perf policy's
``nvmlDeviceGetViolationStatus`` where it has one (asked once a collection), and is absent
otherwise, never 0. NVLink rows are asked only for the links the GPU has: its link count
(``NVML_FI_DEV_NVLINK_LINK_COUNT``) is read once per GPU, in a call of its own; a GPU that does
not answer it has no NVLink and none of those series.

Measured on an H100 (driver 580.159.04, ``scripts/gpu/check_throttle_time.py``): the eleven
throttle-time fields in one call cost 1.31 ms (three of them ~0.56 ms each, the rest ~3 us);
the eight violation-status calls they replace cost 5.15 ms together.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from exporter.catalogue.metrics import NvmlFields, Value
from exporter.catalogue.metrics.nvlink import LINK_COUNT
from exporter.sources.nvml.errors import UNSUPPORTED_CODES

log = logging.getLogger(__name__)

#: Field answers meaning "never answers this field": besides the usual unsupported codes,
#: INVALID_ARGUMENT (an id this driver does not know, a link it does not have).
INVALID_ARGUMENT: Final = 2
FIELD_UNSUPPORTED: Final = UNSUPPORTED_CODES | {INVALID_ARGUMENT}
#: ``c_nvmlValue_t`` member by ``nvmlValueType_t``.
_VALUE_MEMBERS: Final = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
#: The guarded calls' names (``GpuState.unsupported`` keys).
CALL: Final = "field_values"
LINK_COUNT_CALL: Final = "nvlink_link_count"


@dataclass(frozen=True, slots=True)
class FieldEntry:
    """One value of a field-value row: where it goes, the (field id, scope) pairs that may
    answer it, the perf policy behind it (None: none) and, on NVLink rows, its link."""

    row: str
    label: str | None
    fields: tuple[tuple[int, int], ...]
    policy: int | None
    link: int | None
    divisor: float


@dataclass(frozen=True, slots=True)
class FieldPlan:
    """The field-value rows of a set of groups, as entries."""

    entries: tuple[FieldEntry, ...]
    nvlink: bool  # some entry is an NVLink link's


def plan(rows: Iterable[tuple[str, NvmlFields]], argument: Callable[[Any], int]
         ) -> FieldPlan | None:
    """The entries of ``rows`` (name, spec); None without any. ``argument`` resolves a policy
    constant (the binding's value, else nvml.h's)."""
    entries = tuple(
        FieldEntry(name, read.label, tuple((f.id, f.scope) for f in read.fields),
                   None if read.policy is None else argument(read.policy),
                   int(read.label) if spec.nvlink and read.label is not None else None,
                   spec.divisor)
        for name, spec in rows for read in spec.reads)
    if not entries:
        return None
    return FieldPlan(entries, any(entry.link is not None for entry in entries))


@dataclass(slots=True)
class FieldState:
    """What one GPU answered so far: the fields still worth asking per entry (one, once it
    answered), the entries read through their policy, those never to ask again, its links."""

    plan: FieldPlan | None = None  # what the entry numbers below refer to
    alive: dict[int, tuple[int, ...]] = field(default_factory=dict)  # entry -> alternatives
    via_policy: set[int] = field(default_factory=set)
    dead: set[int] = field(default_factory=set)
    links: int | None = None  # None: not known yet; 0: no NVLink
    request: tuple[list[tuple[int, int]], list[tuple[int, int]]] | None = None  # cached

    def use(self, plan: FieldPlan) -> None:
        """Refer to ``plan`` (another set of groups: start over, keeping the links)."""
        if self.plan is not plan:
            self.plan, self.request = plan, None
            self.alive, self.via_policy, self.dead = {}, set(), set()


class GpuFields(Protocol):
    """What the read needs of the GPU (``exporter.sources.nvml.device.GpuState`` has it)."""

    index: int
    handle: Any
    unsupported: set[str]
    fields: FieldState


class Binding(Protocol):
    """The binding's functions (``exporter.sources.nvml.device.Binding``)."""

    def function(self, name: str) -> Callable[..., Any] | None: ...


class Calls(Protocol):
    """The collection's guarded calls (``exporter.sources.nvml.device.FieldCalls``)."""

    @property
    def binding(self) -> Binding: ...
    def call(self, gpu: Any, name: str, function: Callable[..., Any] | None,
             *args: Any) -> Any: ...
    def count(self, kind: str, n: int = 1) -> None: ...


def number(value: Any) -> float | None:
    """A ``c_nvmlFieldValue_t``'s value as a number (None: an unknown value type)."""
    kind = int(value.valueType)
    if not 0 <= kind < len(_VALUE_MEMBERS):
        return None
    return float(getattr(value.value, _VALUE_MEMBERS[kind]))


def read_fields(calls: Calls, gpu: GpuFields, fields: FieldPlan) -> dict[str, Value]:
    """The values of ``fields`` for one GPU (absent where it does not answer).

    Raises:
        GpuDown, NvmlFatal: as the guarded calls do.
    """
    state = gpu.fields
    state.use(fields)
    if fields.nvlink and state.links is None:
        _read_link_count(calls, gpu)
    values: dict[str, Value] = {}
    request, owners = _request(state, fields)
    if request:
        answers = calls.call(gpu, CALL, calls.binding.function("nvmlDeviceGetFieldValues"),
                             request)
        if answers is None:
            if CALL in gpu.unsupported:  # no field values at all: every policy, or nothing
                _without_fields(state, fields, range(len(fields.entries)))
        else:
            _take(calls, gpu, fields, (owners, answers), values)
    for index in sorted(state.via_policy):
        _read_policy(calls, gpu, fields.entries[index], index, values)
    return values


def _read_link_count(calls: Calls, gpu: GpuFields) -> None:
    """``gpu.fields.links`` from the link-count field (0: no NVLink; None: ask again)."""
    state = gpu.fields
    answers = calls.call(gpu, LINK_COUNT_CALL,
                         calls.binding.function("nvmlDeviceGetFieldValues"),
                         [(LINK_COUNT.id, LINK_COUNT.scope)])
    if answers is None:
        if LINK_COUNT_CALL in gpu.unsupported:
            state.links = 0
        return
    answer = answers[0]
    code = int(answer.nvmlReturn)
    if code == 0:
        found = number(answer)
        state.links = int(found) if found is not None and found > 0 else 0
    elif code in FIELD_UNSUPPORTED:
        state.links = 0
    else:
        calls.count("nvml_call")
        return
    state.request = None
    if state.links:
        log.info("GPU %d: %d NVLink links", gpu.index, state.links)


def _request(state: FieldState, fields: FieldPlan
             ) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The (field, scope) pairs to ask and, for each, (entry, alternative); cached per GPU
    until what it answered changes."""
    if state.request is not None:
        return state.request
    request: list[tuple[int, int]] = []
    owners: list[tuple[int, int]] = []
    for index, entry in enumerate(fields.entries):
        if index in state.dead or index in state.via_policy:
            continue
        if entry.link is not None and (state.links is None or entry.link >= state.links):
            continue  # no links known yet (asked again next time), or not this link
        for alternative in state.alive.get(index, range(len(entry.fields))):
            request.append(entry.fields[alternative])
            owners.append((index, alternative))
    if state.links is not None or not fields.nvlink:  # fixed until an answer changes it
        state.request = (request, owners)
    return request, owners


def _take(calls: Calls, gpu: GpuFields, fields: FieldPlan,
          asked: tuple[list[tuple[int, int]], Any], values: dict[str, Value]) -> None:
    """Store the answers to ``asked`` ((entry, alternative) of each request, the call's
    answers); learn which fields each entry's GPU answers."""
    owners, answers = asked
    state = gpu.fields
    answered: dict[int, int] = {}  # entry -> the first alternative that answered
    refused: dict[int, set[int]] = {}
    transient = 0
    for position, (index, alternative) in enumerate(owners):
        answer = answers[position]
        code = int(answer.nvmlReturn)
        if code == 0:
            found = number(answer)
            if found is not None and index not in answered:
                answered[index] = alternative
                entry = fields.entries[index]
                _store(values, entry, found / entry.divisor)
        elif code in FIELD_UNSUPPORTED:
            refused.setdefault(index, set()).add(alternative)
        else:
            transient += 1
    if transient:
        calls.count("nvml_call", transient)
    changed = False
    for index, alternative in answered.items():
        if state.alive.get(index) != (alternative,):
            state.alive[index] = (alternative,)
            changed = True
    gone = []
    for index, alternatives in refused.items():
        if index in answered:
            continue
        left = tuple(a for a in state.alive.get(index, range(len(fields.entries[index].fields)))
                     if a not in alternatives)
        state.alive[index] = left
        changed = True
        if not left:
            gone.append(index)
    if gone:
        _without_fields(state, fields, gone)
    if changed:
        state.request = None


def _without_fields(state: FieldState, fields: FieldPlan, indexes: Iterable[int]) -> None:
    """Entries no field answers: read through their policy, or never again."""
    for index in indexes:
        if fields.entries[index].policy is not None:
            state.via_policy.add(index)
        else:
            state.dead.add(index)
    state.request = None


def _read_policy(calls: Calls, gpu: GpuFields, entry: FieldEntry, index: int,
                 values: dict[str, Value]) -> None:
    """One entry through ``nvmlDeviceGetViolationStatus`` (violation time in ns)."""
    name = f"violation_status_{entry.policy}"
    answer = calls.call(gpu, name, calls.binding.function("nvmlDeviceGetViolationStatus"),
                        entry.policy)
    if answer is not None:
        _store(values, entry, float(answer.violationTime) / entry.divisor)
    elif name in gpu.unsupported:
        gpu.fields.via_policy.discard(index)
        gpu.fields.dead.add(index)


def _store(values: dict[str, Value], entry: FieldEntry, value: float) -> None:
    if entry.label is None:
        values[entry.row] = value
    else:
        labelled = values.setdefault(entry.row, {})
        assert isinstance(labelled, dict)
        labelled[entry.label] = value


__all__ = ["CALL", "FIELD_UNSUPPORTED", "LINK_COUNT_CALL", "FieldEntry", "FieldPlan", "FieldState",
           "number", "plan", "read_fields"]
