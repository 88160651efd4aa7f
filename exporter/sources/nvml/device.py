"""What the NVML reader and its helpers share: the binding's functions, one GPU as the source
holds it between collections, and one guarded NVML call of one of its fields.

The reader (``exporter.sources.nvml.reader``) and the helpers it runs (the compiled plain
reads, the special readers, the memory-health reads) take these as arguments; none of them
reaches into another's state, and this module imports none of them.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, NamedTuple

from exporter.catalogue.metrics import UNKNOWN_VALUE, Constant, Value
from exporter.health import EventCounts
from exporter.snapshot import GpuIdentity
from exporter.sources.nvml.errors import Reaction, describe, raise_if_down
from exporter.sources.nvml.fields import FieldState
from exporter.sources.nvml.gpm import GpmState
from exporter.sources.nvml.last_active import LastActive
from exporter.sources.nvml.mig import MigReader

log = logging.getLogger(__name__)


class Binding:
    """The binding's functions and constants, resolved once per ``start``.

    A function the binding lacks is ``None``; the reader then treats the field as unsupported.
    """

    def __init__(self, nvml: ModuleType) -> None:
        self.nvml = nvml
        self.error: type[BaseException] = nvml.NVMLError
        nvml.nvmlDeviceGetMemoryInfo  # noqa: B018 - AttributeError: not nvidia-ml-py
        self.mismatch: type[BaseException] | tuple[()] = (
            getattr(nvml, "NVMLLibraryMismatchError", None) or ())
        self._functions: dict[str, Callable[..., Any] | None] = {}
        self._arguments: dict[str, tuple[int, ...]] = {}
        version = getattr(nvml, "nvmlMemory_v2", None)
        memory = self.function("nvmlDeviceGetMemoryInfo")
        # Memory info asking for the v2 struct (None: the binding cannot).
        self.memory_v2: Callable[..., Any] | None = (
            None if version is None or memory is None
            else functools.partial(memory, version=version))

    def function(self, name: str) -> Callable[..., Any] | None:
        """pynvml's ``name``, or None when the binding lacks it."""
        if name not in self._functions:
            self._functions[name] = getattr(self.nvml, name, None)
        return self._functions[name]

    def argument(self, argument: int | Constant) -> int:
        """An argument's value (a constant the binding lacks takes its nvml.h value)."""
        if isinstance(argument, Constant):
            return int(getattr(self.nvml, argument.name, argument.value))
        return argument

    def arguments(self, key: str, arguments: tuple[int | Constant, ...]) -> tuple[int, ...]:
        """The values of a special reader's ``arguments``, worked out once under ``key``."""
        found = self._arguments.get(key)
        if found is None:
            found = self._arguments[key] = tuple(self.argument(a) for a in arguments)
        return found


class EccRead(NamedTuple):
    """The last complete ECC read of a GPU (``exporter.sources.nvml.health.read_ecc``): reused
    while the volatile counts stay the same, for a while."""

    volatile: tuple[int | None, int | None]  # (corrected, uncorrected) since the driver loaded
    at: float  # when, in monotonic seconds
    values: dict[str, Value]  # what the read returned, lifetime counts included


@dataclass(eq=False, slots=True)
class GpuState:
    """What the source keeps per GPU index between collections."""

    index: int
    identity: GpuIdentity
    handle: Any = None  # None: not acquired yet, or dropped after the GPU was lost
    identity_known: bool = False
    error: str | None = None  # why the GPU is not answering (handle refused, lost, ...)
    unsupported: set[str] = field(default_factory=set)  # fields never to ask for again
    last_seen_timestamp: int = 0  # newest process-utilisation sample seen (microseconds)
    last_active: LastActive = field(default_factory=LastActive)  # per pid, across collections
    garbled_seen: bool = False  # garbled process entries were already reported in the log
    ecc_read: EccRead | None = None  # the last complete ECC read
    gpm: GpmState = field(default_factory=GpmState)  # GPM samples and status
    fields: FieldState = field(default_factory=FieldState)  # what its field values answer


def placeholder_identity(index: int) -> GpuIdentity:
    """Identity for a GPU whose handle could not be opened (so nothing is known about it)."""
    return GpuIdentity(index=index, uuid=UNKNOWN_VALUE, name=UNKNOWN_VALUE,
                       pci_bus_id=UNKNOWN_VALUE, memory_total_bytes=0)


class FieldCalls:
    """One collection's guarded NVML calls, counting problems into ``errors``, and what the
    special reads of that collection share (throttle masks seen, the XID waiter's counts, the
    MIG reader)."""

    def __init__(self, binding: Binding, errors: dict[str, int],
                 throttle_cache: dict[int, dict[str, float]], *,
                 events: EventCounts | None = None, mig: MigReader | None = None) -> None:
        self.binding = binding
        self._error = binding.error
        self._mismatch = binding.mismatch
        self.errors = errors
        self.throttle_cache = throttle_cache
        self.events = events  # the XID waiter's counts at this collection (None: not running)
        self.mig = mig

    def count(self, kind: str, n: int = 1) -> None:
        """Add ``n`` to the ``kind`` error counter of this collection."""
        self.errors[kind] = self.errors.get(kind, 0) + n

    def call(self, gpu: GpuState, name: str, function: Callable[..., Any] | None,
             *args: Any) -> Any:
        """One NVML call for one field; None when unsupported or failed.

        ``name`` identifies the field in ``gpu.unsupported`` (asked once, then never again).

        Raises:
            GpuDown: the GPU is lost, needs a reset, or answered "unknown error".
            NvmlFatal: NVML itself stopped working.
        """
        if name in gpu.unsupported:
            return None
        if function is None:
            gpu.unsupported.add(name)
            return None
        try:
            return function(gpu.handle, *args)
        except Exception as exc:  # sorted out by ``failed``
            self.failed(gpu, name, exc)
            return None

    def failed(self, gpu: GpuState, name: str, exc: Exception) -> None:
        """React to ``exc`` from the call for ``name``: mark the field unsupported, count a
        transient failure, or raise ``GpuDown``/``NvmlFatal``; anything else is re-raised."""
        if isinstance(exc, self._mismatch):
            gpu.unsupported.add(name)
            return
        if not isinstance(exc, self._error):
            raise exc
        if raise_if_down(exc) is Reaction.UNSUPPORTED:
            log.info("GPU %d: %s not supported (%s); not asking again",
                     gpu.index, name, describe(exc))
            gpu.unsupported.add(name)
            return
        log.debug("GPU %d: %s failed: %s", gpu.index, name, describe(exc))
        self.count("nvml_call")

    def call_newest(self, gpu: GpuState, names: tuple[str, ...], *args: Any) -> Any:
        """``call`` on the first of ``names`` this GPU has not found unsupported."""
        for name in names:
            result = self.call(gpu, name, self.binding.function(name), *args)
            if result is not None or name not in gpu.unsupported:
                return result
        return None
