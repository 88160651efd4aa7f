"""The XID event waiter: NVML events counted in the background, never on the scrape path.

Per GPU one NVML event set, registered for the critical-XID event and the other health events
worth having, and one daemon thread that waits on it with a short timeout. Counts are handed to
the collection through an immutable ``EventCounts`` that the waiter replaces (copy on write)
whenever an event arrives, so a scrape reads one attribute and takes no lock.

NVML calls and the behaviour relied on (nvml.h; pynvml of nvidia-ml-py 13.x; see
``docs/health.md`` for the full list and sources):

- ``nvmlInit`` keeps a reference count ("Shutdown only occurs when the reference count reaches
  zero"): the waiter takes its own reference in ``start`` and gives it back in ``stop``, so the
  NVML source may shut down and re-initialise without pulling the library from under it.
- ``nvmlDeviceGetSupportedEventTypes`` gives the bitmask of event types a GPU supports; the
  waiter registers ``WANTED & supported`` (as NVIDIA's k8s-device-plugin does). A GPU with no
  wanted type, or whose ``nvmlDeviceRegisterEvents`` answers ``NOT_SUPPORTED`` ("None of the
  requested eventTypes are registered"), is reported once in the log and as
  ``registered=False``, and costs nothing afterwards: no thread, no further call.
  ``UNKNOWN`` from registration leaves the set "in undefined state": it is freed.
- ``nvmlEventSetWait_v2(set, timeout_ms)`` returns the next event or raises ``TIMEOUT``
  (pynvml raises ``NVMLError_Timeout``; measured on the H200). NVML has no call that wakes a
  blocked wait, so the wait timeout bounds how long ``stop`` takes. ``GPU_IS_LOST`` (or any
  other error) frees the set and re-registers after a back-off: a lost GPU never ends the
  thread, and the other GPUs' threads are unaffected.
- Event data: ``eventType`` (one bit), ``eventData`` (the XID for
  ``nvmlEventTypeXidCriticalError``, 999 for an unknown XID), ``gpuInstanceId`` /
  ``computeInstanceId`` (the MIG instance an XID is attributable to, else 0xFFFFFFFF). It
  carries **no process id and no timestamp**: XIDs cannot be attributed to a process from
  NVML (the kernel log line ``NVRM: Xid ... pid=`` can), and the time recorded is when the
  waiter received the event.
- ``nvmlEventSetFree`` is called by the thread that owns the set, after its last wait returned,
  so a free never races a blocked wait.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from types import MappingProxyType, ModuleType
from typing import Any, Final

from exporter.health import EventCounts, GpuEvents, XidKey, XidStat
from exporter.sources.nvml.errors import GPU_IS_LOST, NOT_SUPPORTED, describe

log = logging.getLogger(__name__)

TIMEOUT: Final = 10  # NVML_ERROR_TIMEOUT
NO_INSTANCE: Final = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId when not attributable
XID_EVENT: Final = "nvmlEventTypeXidCriticalError"

#: Event types counted besides XIDs: pynvml constant name -> ``event`` label value. Left out on
#: purpose: single-bit ECC (the polled ECC counters carry it; it can fire constantly), P-state,
#: clock and power-source changes (normal operation, not health).
HEALTH_EVENTS: Final = {
    "nvmlEventTypeDoubleBitEccError": "double_bit_ecc",
    "nvmlEventTypeSingleBitEccErrorStorm": "single_bit_ecc_storm",
    "nvmlEventTypeDramRetirementEvent": "dram_retirement",
    "nvmlEventTypeDramRetirementFailure": "dram_retirement_failure",
    "nvmlEventTypeNonFatalPoisonError": "non_fatal_poison",
    "nvmlEventTypeFatalPoisonError": "fatal_poison",
    "nvmlEventTypeGpuUnavailableError": "gpu_unavailable",
    "nvmlEventTypeGpuRecoveryAction": "recovery_action",
    "nvmlEventMigConfigChange": "mig_config_change",
}
DEFAULT_WAIT_MS: Final = 500
#: The pynvml functions the waiter needs (nvidia-ml-py has had them for years).
EVENT_FUNCTIONS: Final = ("nvmlEventSetCreate", "nvmlDeviceRegisterEvents",
                          "nvmlDeviceGetSupportedEventTypes", "nvmlEventSetWait_v2",
                          "nvmlEventSetFree")
_BACKOFF_FIRST, _BACKOFF_MAX = 1.0, 30.0


class _Outcome(Enum):
    WATCHING = "watching"
    RETRY = "retry"  # open/registration failed for a reason that may pass (lost GPU, ...)
    UNSUPPORTED = "unsupported"  # never going to work on this GPU: no thread, no more calls


@dataclass(eq=False)
class _Watch:
    index: int
    uuid: str
    handle: Any
    event_set: Any = None
    mask: int = 0
    thread: threading.Thread | None = None


class EventWaiter:
    """Counts NVML events per GPU in background threads. ``nvml`` is the pynvml module.

    ``start`` and ``stop`` are idempotent; ``counts()`` may be called from any thread at any
    time and never blocks on NVML.
    """

    def __init__(self, nvml: ModuleType, *, wait_ms: int = DEFAULT_WAIT_MS,
                 clock: Callable[[], float] = time.time) -> None:
        self._nvml = nvml
        self._wait_ms = wait_ms
        self._clock = clock
        self._stop = threading.Event()
        self._write = threading.Lock()  # writers only: readers take the current snapshot
        self._counts = EventCounts()
        self._watches: list[_Watch] = []
        self._initialized = False
        self._wanted = self._wanted_types(nvml)

    @staticmethod
    def _wanted_types(nvml: ModuleType) -> dict[int, str]:
        """Event bit -> label, for the types this binding defines."""
        wanted: dict[int, str] = {}
        for name, label in {XID_EVENT: "xid", **HEALTH_EVENTS}.items():
            bit = getattr(nvml, name, None)
            if isinstance(bit, int) and bit:
                wanted[bit] = label
        return wanted

    # --- reading ------------------------------------------------------------------------------
    def counts(self) -> EventCounts:
        """The current counts (an immutable snapshot; one attribute read)."""
        return self._counts

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Take an NVML reference, register events on every GPU, start one thread per GPU.

        Never raises for one GPU: a GPU that cannot be opened or registered is reported in its
        ``GpuEvents.error``. Raises only when NVML cannot be initialised or counted.

        Raises:
            NVMLError: ``nvmlInit`` or ``nvmlDeviceGetCount`` failed.
        """
        if self._initialized:
            return
        nvml = self._nvml
        nvml.nvmlInit()
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception:
            nvml.nvmlShutdown()
            raise
        self._initialized = True
        self._stop.clear()
        self._watches = []
        for index in range(count):
            watch = _Watch(index=index, uuid="unknown", handle=None)
            self._watches.append(watch)
            if self._register(watch, first=True) is not _Outcome.UNSUPPORTED:
                watch.thread = threading.Thread(target=self._run, args=(watch,),
                                                name=f"xid-waiter-{index}", daemon=True)
        self._set_running(True)
        for watch in self._watches:
            if watch.thread is not None:
                watch.thread.start()

    def stop(self, timeout: float | None = None) -> float:
        """Stop every thread, free the event sets, give NVML's reference back.

        Each thread returns within one wait timeout. ``timeout`` bounds the whole join
        (default: two wait timeouts plus a second). A thread still stuck in NVML after it (a
        hung driver) is left behind as a daemon with its set, and NVML is then not shut down,
        so nothing is freed under a running wait. Returns the seconds ``stop`` took.
        """
        began = time.monotonic()
        if not self._initialized:
            return 0.0
        self._stop.set()
        limit = timeout if timeout is not None else 2 * self._wait_ms / 1000 + 1.0
        deadline = began + limit
        stuck = []
        for watch in self._watches:
            if watch.thread is not None:
                watch.thread.join(max(0.0, deadline - time.monotonic()))
                if watch.thread.is_alive():
                    stuck.append(watch.index)
            elif watch.event_set is not None:  # registered but never started
                self._free(watch)
        if stuck:
            log.warning("XID waiter: thread(s) of GPU(s) %s still blocked in NVML after %.1f s; "
                        "leaving them (daemon) and NVML initialised", stuck, limit)
        else:
            try:
                self._nvml.nvmlShutdown()
            except Exception as exc:  # shutting down a broken library must not fail the caller
                log.debug("nvmlShutdown failed: %s", describe(exc))
        self._initialized = False
        self._set_running(False)
        return time.monotonic() - began

    # --- per GPU ------------------------------------------------------------------------------
    def _register(self, watch: _Watch, *, first: bool) -> _Outcome:
        """Open the GPU and register its events."""
        nvml = self._nvml
        try:
            watch.handle = nvml.nvmlDeviceGetHandleByIndex(watch.index)
            watch.uuid = str(nvml.nvmlDeviceGetUUID(watch.handle))
        except nvml.NVMLError as exc:
            self._update(watch, registered=False, watched=(),
                         error=f"cannot open GPU {watch.index}: {describe(exc)}")
            return self._retry_later(watch, exc)
        try:
            supported = int(nvml.nvmlDeviceGetSupportedEventTypes(watch.handle))
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) != NOT_SUPPORTED:
                self._update(watch, registered=False, watched=(), error=describe(exc))
                return self._retry_later(watch, exc)
            supported = 0
        mask = sum(bit for bit in self._wanted if bit & supported)
        if not mask:
            self._unsupported(watch, f"GPU supports none of the events watched "
                                     f"(supported mask {supported:#x})", first)
            return _Outcome.UNSUPPORTED
        try:
            watch.event_set = nvml.nvmlEventSetCreate()
            mask = self._register_mask(watch, mask)
        except nvml.NVMLError as exc:
            self._free(watch)
            if getattr(exc, "value", None) == NOT_SUPPORTED:
                self._unsupported(watch, f"event registration not supported: {describe(exc)}",
                                  first)
                return _Outcome.UNSUPPORTED
            self._update(watch, registered=False, watched=(),
                         error=f"event registration failed: {describe(exc)}")
            return self._retry_later(watch, exc)
        watch.mask = mask
        watched = tuple(label for bit, label in self._wanted.items() if bit & mask)
        self._update(watch, registered="xid" in watched, watched=watched, error=None)
        log.log(logging.INFO if first else logging.WARNING,
                "GPU %d (%s): watching NVML events %s", watch.index, watch.uuid,
                ", ".join(watched))
        return _Outcome.WATCHING

    def _register_mask(self, watch: _Watch, mask: int) -> int:
        """Register ``mask``; if NVML refuses the combination, XID events alone.

        NOT_SUPPORTED means "None of the requested eventTypes are registered" and the set "can
        still be used", so one refused extra type must not cost the XID events.

        Raises:
            NVMLError: registration failed (also for XID events alone).
        """
        nvml = self._nvml
        try:
            nvml.nvmlDeviceRegisterEvents(watch.handle, mask, watch.event_set)
            return mask
        except nvml.NVMLError as exc:
            xid = next((bit for bit, label in self._wanted.items() if label == "xid"), 0)
            if getattr(exc, "value", None) != NOT_SUPPORTED or not mask & xid or mask == xid:
                raise
            log.info("GPU %d: NVML refused event mask %#x (%s); watching XID events only",
                     watch.index, mask, describe(exc))
        nvml.nvmlDeviceRegisterEvents(watch.handle, xid, watch.event_set)
        return xid

    @staticmethod
    def _retry_later(watch: _Watch, exc: BaseException) -> _Outcome:
        log.warning("GPU %d: cannot watch NVML events: %s; retrying with back-off",
                    watch.index, describe(exc))
        return _Outcome.RETRY

    def _unsupported(self, watch: _Watch, why: str, first: bool) -> None:
        if first:
            log.info("GPU %d (%s): XID/health events not watched: %s (reported once; counts "
                     "for this GPU stay absent)", watch.index, watch.uuid, why)
        self._update(watch, registered=False, watched=(), error=why)

    def _free(self, watch: _Watch) -> None:
        if watch.event_set is None:
            return
        try:
            self._nvml.nvmlEventSetFree(watch.event_set)
        except Exception as exc:  # freeing a set of a lost GPU may fail; nothing to do
            log.debug("GPU %d: nvmlEventSetFree failed: %s", watch.index, describe(exc))
        watch.event_set = None

    def _run(self, watch: _Watch) -> None:
        backoff = _BACKOFF_FIRST
        try:
            while not self._stop.is_set():
                if watch.event_set is None:
                    if self._stop.wait(backoff):
                        break
                    backoff = min(backoff * 2, _BACKOFF_MAX)
                    if self._register(watch, first=False) is _Outcome.UNSUPPORTED:
                        break  # the GPU came back without event support: nothing to wait on
                    continue
                try:
                    data = self._nvml.nvmlEventSetWait_v2(watch.event_set, self._wait_ms)
                except self._nvml.NVMLError as exc:
                    if getattr(exc, "value", None) == TIMEOUT:
                        continue
                    self._lost(watch, exc)
                    continue
                backoff = _BACKOFF_FIRST
                self._record(watch, data)
        except Exception:  # a bug here must not kill the exporter; the GPU shows the error
            log.exception("XID waiter for GPU %d crashed", watch.index)
            self._update(watch, registered=False, error="event waiter crashed (see log)")
        finally:
            self._free(watch)

    def _lost(self, watch: _Watch, exc: BaseException) -> None:
        code = getattr(exc, "value", None)
        what = "GPU is lost" if code == GPU_IS_LOST else "event wait failed"
        log.warning("GPU %d (%s): %s: %s; re-registering events with back-off", watch.index,
                    watch.uuid, what, describe(exc))
        self._update(watch, registered=False, error=f"{what}: {describe(exc)}")
        self._free(watch)  # after any error the set's state is unknown: rebuild it

    def _record(self, watch: _Watch, data: Any) -> None:
        kind = int(data.eventType)
        label = self._wanted.get(kind)
        if label is None:
            log.debug("GPU %d: ignoring event type %#x", watch.index, kind)
            return
        now = self._clock()
        with self._write:
            gpu = self._gpu(watch)
            if label == "xid":
                xid = int(data.eventData)
                if xid == 0:  # not an XID (seen with other event types); nothing to count
                    return
                key = XidKey(xid, _instance(data, "gpuInstanceId"),
                             _instance(data, "computeInstanceId"))
                old = gpu.xids.get(key)
                xids = dict(gpu.xids)
                xids[key] = XidStat(count=1 if old is None else old.count + 1, last_seconds=now)
                gpu = replace(gpu, xids=MappingProxyType(xids))
                log.warning("GPU %d (%s): XID %d%s", watch.index, watch.uuid, xid,
                            "" if key.gpu_instance is None else
                            f" (MIG GPU instance {key.gpu_instance}, compute instance "
                            f"{key.compute_instance})")
            else:
                events = dict(gpu.events)
                events[label] = events.get(label, 0) + 1
                gpu = replace(gpu, events=MappingProxyType(events))
                log.warning("GPU %d (%s): NVML event %s", watch.index, watch.uuid, label)
            self._publish(gpu)

    # --- the shared snapshot --------------------------------------------------------------------
    def _gpu(self, watch: _Watch) -> GpuEvents:
        return self._counts.gpus.get(watch.index) or GpuEvents(index=watch.index, uuid=watch.uuid)

    def _update(self, watch: _Watch, **changes: Any) -> None:
        with self._write:
            self._publish(replace(self._gpu(watch), uuid=watch.uuid, **changes))

    def _publish(self, gpu: GpuEvents) -> None:
        """Replace one GPU's entry (caller holds ``_write``)."""
        gpus = dict(self._counts.gpus)
        gpus[gpu.index] = gpu
        self._counts = EventCounts(gpus=MappingProxyType(gpus), running=self._counts.running)

    def _set_running(self, running: bool) -> None:
        with self._write:
            self._counts = replace(self._counts, running=running)


def _instance(data: Any, name: str) -> int | None:
    value = getattr(data, name, NO_INSTANCE)
    return None if value is None or int(value) == NO_INSTANCE else int(value)
