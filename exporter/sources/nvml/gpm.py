"""GPU activity through NVML's GPM (GPU Performance Monitoring, Hopper and newer).

A GPM figure describes the window between two samples. Each GPU (and each MIG GPU instance)
keeps two sample buffers: a collection takes a sample into the spare one, asks for the
window since the previous sample, and the new sample becomes the previous. The first
collection, and one whose previous sample is older than ``MAX_WINDOW_SECONDS``, only open a
window: no value rather than an average over a stretch no scrape asked about.

Where GPM is missing the rows are absent and ``gpu_exporter_gpm_status`` says why: the GPU
has none (asked once per handle, never again), the binding is too old, or NVML refused the
sample (asked again after ``RETRY_SECONDS``, doubling to ``MAX_RETRY_SECONDS``: never a storm of
calls). One log line per change of status. Nothing here enables streaming or changes any
device setting.

NVML behaviour relied on (nvml.h; measured on an H200, driver 580.159.04):

- ``nvmlGpmQueryDeviceSupport(h).isSupportedDevice``: 0 on GPUs before Hopper.
- ``nvmlGpmSampleGet``: ~0.24 ms; ``nvmlGpmMetricsGet``: ~1 us a metric, except
  GRAPHICS_UTIL (~1.5 ms, hence its opt-in group). Each metric has its own ``nvmlReturn``.
- The same sample twice, or a buffer never filled: INVALID_ARGUMENT.
- ``nvmlGpmMigSampleGet`` on a GPU with MIG off: INVALID_ARGUMENT.
- NVLink metrics answer success and 0 on a GPU without links, so NVLink rows are read only
  where ``nvmlDeviceGetNvLinkState(h, 0)`` answers.
- GPM takes no profiling lock: Nsight Compute profiling another process leaves it working.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import MappingProxyType, ModuleType
from typing import Any, Final, NamedTuple

from exporter.catalogue.metrics import GPM_ROWS, Group, Metric, NvmlGpm, Value
from exporter.catalogue.metrics.activity import GPM_STATUS, GPM_STATUSES, PER_INSTANCE
from exporter.sources.nvml.errors import NO_PERMISSION, Reaction, describe, raise_if_down

log = logging.getLogger(__name__)

#: A previous sample older than this opens a new window instead of closing one: Prometheus
#: looks back 5 minutes, so an average over a longer stretch describes nothing it shows.
MAX_WINDOW_SECONDS: Final = 300.0
RETRY_SECONDS: Final = 60.0
MAX_RETRY_SECONDS: Final = 900.0
IN_USE: Final = 19  # NVML_ERROR_IN_USE: the counters are held by someone else
#: The binding's functions GPM needs (nvidia-ml-py releases before GPM lack them).
FUNCTIONS: Final = ("nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleFree",
                    "nvmlGpmSampleGet", "nvmlGpmMetricsGet", "c_nvmlGpmMetricsGet_t")
_STATUS: Final = GPM_STATUS.name
_TERMINAL: Final = frozenset({"not_supported", "binding_too_old"})
_STATUS_VALUES: Final = {status: MappingProxyType({status: 1.0}) for status in GPM_STATUSES}


#: GPM values per MIG GPU instance, by instance id.
PerInstance = dict[int, dict[str, Value]]


@dataclass(slots=True)
class Gpu:
    """What a GPM read needs of the GPU it reads: its index (for the log), its handle, and
    where this collection counts a failure."""

    index: int
    handle: Any
    count: Callable[[str], None]


class GpmMetric(NamedTuple):
    """One value a GPM read fills: ``values[row]`` (or ``values[row][label]``)."""

    row: str
    label: str | None
    metric_id: int
    scale: float
    ratio: bool  # a 0-1 ratio: clipped to 1 (GPM's percentages can overshoot 100 slightly)
    nvlink: bool


class GpmPlan(NamedTuple):
    """The GPM reads of one set of groups: per GPU and per MIG GPU instance."""

    device: tuple[GpmMetric, ...]
    instance: tuple[GpmMetric, ...]


def plan(groups: frozenset[Group], argument: Callable[[Any], int]) -> GpmPlan | None:
    """The GPM metrics of the enabled ``groups`` (None: no GPM row is on)."""
    rows = [row for row in GPM_ROWS if row.group in groups and row is not GPM_STATUS]
    if not rows:
        return None
    per_instance = {gpu_row.name for gpu_row, _ in PER_INSTANCE}
    device = tuple(_metrics(rows, argument))
    return GpmPlan(device, tuple(m for m in device if m.row in per_instance))


def _metrics(rows: Iterable[Metric], argument: Callable[[Any], int]) -> Iterable[GpmMetric]:
    for row in rows:
        spec = row.nvml
        assert isinstance(spec, NvmlGpm)
        for gpm_field in spec.fields:
            yield GpmMetric(row.name, gpm_field.label, argument(gpm_field.metric), spec.scale,
                            row.unit == "ratio", spec.nvlink)


@dataclass(eq=False, slots=True)
class Window:
    """The two sample buffers of one GPU or MIG GPU instance."""

    buffers: tuple[Any, Any]
    previous: int | None = None  # index of the buffer holding the last sample (None: none)
    taken_at: float = 0.0  # when, in monotonic seconds

    @property
    def spare(self) -> Any:
        """The buffer the next sample goes into."""
        return self.buffers[0 if self.previous is None else 1 - self.previous]


@dataclass(eq=False, slots=True)
class GpmState:
    """GPM of one GPU, kept between collections (reset with ``forget`` on a new handle)."""

    status: str = "ok"
    retry_at: float = 0.0  # monotonic seconds before which a failed GPU is not asked again
    backoff: float = 0.0
    supported: bool | None = None  # None: not asked yet for this handle
    nvlink: bool | None = None
    device: Window | None = None
    instances: dict[int, Window] = field(default_factory=dict)
    request: Any = None  # the metrics request struct, reused

    def windows(self) -> list[Window]:
        return [w for w in (self.device, *self.instances.values()) if w is not None]

    def forget(self) -> None:
        """A new handle (after a reset): ask for support again, open new windows."""
        self.supported = self.nvlink = None
        self.status, self.retry_at, self.backoff = "ok", 0.0, 0.0
        for window in self.windows():
            window.previous = None


class GpmReader:
    """Reads GPM for one collection of one GPU (each GPU's state is its worker's alone)."""

    def __init__(self, nvml: ModuleType, clock: Callable[[], float] = time.monotonic) -> None:
        self._nvml = nvml
        self._clock = clock
        self.available = all(hasattr(nvml, name) for name in FUNCTIONS)
        self._version = int(getattr(nvml, "NVML_GPM_METRICS_GET_VERSION", 1))

    def read(self, state: GpmState, gpu: Gpu, wanted: GpmPlan,
             instances: Iterable[int] | None) -> tuple[dict[str, Value], PerInstance]:
        """Values of the window since the last collection of the GPU whose GPM ``state`` this
        is: per GPU, and per MIG GPU instance in ``instances`` (None: MIG is off; with MIG on
        there is no per-GPU read). The status row is always filled.

        Raises:
            GpuDown: the GPU is lost / needs a reset.
            NvmlFatal: NVML itself stopped working.
        """
        values: dict[str, Value] = {}
        per_instance: PerInstance = {}
        now = self._clock()
        if state.status not in _TERMINAL and now >= state.retry_at:
            try:
                if self._usable(gpu, state, wanted):
                    if instances is None:
                        values = self._device(gpu, state, wanted.device, now)
                    else:
                        per_instance = self._instances(gpu, state, wanted.instance,
                                                       tuple(instances), now)
                    self._status(gpu, state, "ok")
            except self._nvml.NVMLError as exc:
                self._failed(gpu, state, exc, now)
            except (ValueError, TypeError, AttributeError, OverflowError) as exc:  # odd answers
                log.debug("GPU %d: odd GPM answer", gpu.index, exc_info=True)
                self._failed(gpu, state, exc, now)
        values[_STATUS] = _STATUS_VALUES[state.status]
        return values, per_instance

    # --- one GPU -------------------------------------------------------------------------------
    def _usable(self, gpu: Gpu, state: GpmState, wanted: GpmPlan) -> bool:
        """Support known and buffers ready; False (status set) where GPM cannot be read."""
        if state.supported is None:
            if not self.available:
                self._status(gpu, state, "binding_too_old")
                return False
            support = self._nvml.nvmlGpmQueryDeviceSupport(gpu.handle)
            state.supported = bool(support.isSupportedDevice)
            if any(m.nvlink for m in wanted.device):
                state.nvlink = self._has_nvlink(gpu)
        if not state.supported:
            self._status(gpu, state, "not_supported")
            return False
        if state.request is None:
            state.request = self._nvml.c_nvmlGpmMetricsGet_t()
        return True

    def _has_nvlink(self, gpu: Gpu) -> bool:
        function = getattr(self._nvml, "nvmlDeviceGetNvLinkState", None)
        if function is None:
            return False
        try:
            function(gpu.handle, 0)
        except self._nvml.NVMLError as exc:
            raise_if_down(exc)
            return False
        return True

    def _device(self, gpu: Gpu, state: GpmState, wanted: tuple[GpmMetric, ...],
                now: float) -> dict[str, Value]:
        if state.device is None:
            state.device = self._window()
        window = state.device
        self._nvml.nvmlGpmSampleGet(gpu.handle, window.spare)
        if not state.nvlink:
            wanted = tuple(m for m in wanted if not m.nvlink)
        return self._close(state, window, wanted, now)

    def _instances(self, gpu: Gpu, state: GpmState, wanted: tuple[GpmMetric, ...],
                   instances: tuple[int, ...], now: float) -> PerInstance:
        for gone in state.instances.keys() - set(instances):  # destroyed GPU instances
            self._free(state.instances.pop(gone))
        found: PerInstance = {}
        for instance in instances:
            window = state.instances.get(instance)
            if window is None:
                window = state.instances[instance] = self._window()
            try:
                self._nvml.nvmlGpmMigSampleGet(gpu.handle, instance, window.spare)
            except self._nvml.NVMLError as exc:  # this instance only (destroyed meanwhile?)
                if raise_if_down(exc) is Reaction.UNSUPPORTED:
                    raise
                log.debug("GPU %d: GPM sample of MIG GPU instance %d failed: %s", gpu.index,
                          instance, describe(exc))
                gpu.count("gpm")
                window.previous = None
                continue
            found[instance] = self._close(state, window, wanted, now)
        return found

    def _window(self) -> Window:
        alloc = self._nvml.nvmlGpmSampleAlloc
        return Window((alloc(), alloc()))

    def _close(self, state: GpmState, window: Window, wanted: tuple[GpmMetric, ...],
               now: float) -> dict[str, Value]:
        """The window from the previous sample to the one just taken into ``spare``; the new
        sample becomes the previous."""
        previous, taken_at = window.previous, window.taken_at
        window.previous = 0 if previous is None else 1 - previous
        window.taken_at = now
        if previous is None or not 0.0 < now - taken_at <= MAX_WINDOW_SECONDS:
            return {}
        return self._metrics(state.request, window.buffers[previous],
                             window.buffers[window.previous], wanted)

    def _metrics(self, request: Any, first: Any, second: Any,
                 wanted: tuple[GpmMetric, ...]) -> dict[str, Value]:
        request.version = self._version
        request.numMetrics = len(wanted)
        request.sample1, request.sample2 = first, second
        slots = request.metrics
        for index, metric in enumerate(wanted):
            slots[index].metricId = metric.metric_id
        self._nvml.nvmlGpmMetricsGet(request)
        values: dict[str, Value] = {}
        for index, metric in enumerate(wanted):
            slot = slots[index]
            if slot.nvmlReturn != 0:
                continue  # this metric alone is unsupported on this GPU or instance
            value = float(slot.value) * metric.scale
            if not math.isfinite(value) or value < 0.0:
                continue
            value = min(round(value, 4), 1.0) if metric.ratio else round(value)
            if metric.label is None:
                values[metric.row] = value
            else:
                labelled = values.setdefault(metric.row, {})
                assert isinstance(labelled, dict)
                labelled[metric.label] = value
        return values

    # --- status --------------------------------------------------------------------------------
    def _failed(self, gpu: Gpu, state: GpmState, exc: BaseException, now: float) -> None:
        """Sort a failed GPM call out: GPU down or NVML gone raise; unsupported stops asking;
        anything else is counted and asked again after the backoff."""
        if raise_if_down(exc) is Reaction.UNSUPPORTED:
            self._status(gpu, state, "not_supported", describe(exc))
            return
        code = getattr(exc, "value", None)
        status = {NO_PERMISSION: "no_permission", IN_USE: "in_use"}.get(
            code if isinstance(code, int) else -1, "error")
        gpu.count("gpm")
        state.backoff = min(MAX_RETRY_SECONDS, state.backoff * 2 or RETRY_SECONDS)
        state.retry_at = now + state.backoff
        for window in state.windows():
            window.previous = None  # the next success only opens a window
        self._status(gpu, state, status, f"{describe(exc)}; asking again in "
                                         f"{state.backoff:.0f} s")

    @staticmethod
    def _status(gpu: Gpu, state: GpmState, status: str, why: str = "") -> None:
        """Set the status; one log line when it changes."""
        if status == state.status:
            return
        previous, state.status = state.status, status
        if status == "ok":
            state.backoff = 0.0
            log.info("GPU %d: GPM activity is read again (was %s)", gpu.index, previous)
        elif status == "not_supported":
            log.info("GPU %d: no GPM on this GPU (%s): SM, tensor and DRAM activity are not "
                     "exported; alerts use utilisation", gpu.index, why or "before Hopper")
        elif status == "binding_too_old":
            log.warning("GPU %d: this nvidia-ml-py has no GPM functions: SM, tensor and DRAM "
                        "activity are not exported (install a current nvidia-ml-py)", gpu.index)
        else:
            log.warning("GPU %d: GPM sample refused: %s", gpu.index, why)

    def release(self, state: GpmState) -> None:
        """Free every sample buffer (the source closes; NVML is still initialised)."""
        for window in state.windows():
            self._free(window)
        state.device = None
        state.instances.clear()
        state.request = None

    def _free(self, window: Window) -> None:
        for buffer in window.buffers:
            try:
                self._nvml.nvmlGpmSampleFree(buffer)
            except Exception as exc:  # freeing during shutdown must not fail it
                log.debug("nvmlGpmSampleFree failed: %s", describe(exc))
