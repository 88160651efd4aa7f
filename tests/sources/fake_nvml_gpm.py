"""GPM (GPU Performance Monitoring) of the fake ``pynvml``: see ``tests.sources.fake_nvml``.

A sample records the GPU's (or MIG GPU instance's) scripted ``gpm`` values when it is taken;
``nvmlGpmMetricsGet`` answers the values of its second sample, after checking the pair the way
NVML does (both filled, distinct, of the same GPU and instance: else INVALID_ARGUMENT).
``gpm_unsupported`` metric ids answer NOT_SUPPORTED in their own ``nvmlReturn``.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.sources.fake_nvml_parts import FakeGpu, FakeHandle

INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3


class FakeGpmSample:
    """What ``nvmlGpmSampleAlloc`` returns."""

    def __init__(self) -> None:
        self.taken: tuple[int, int | None, dict[int, float]] | None = None
        self.freed = False


class FakeMetricsGet:
    """``c_nvmlGpmMetricsGet_t``: the request and its answers."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [types.SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0)
                        for _ in range(64)]


class FakeGpm:
    """The GPM functions, mixed into ``FakeNvml``."""

    NVML_GPM_METRICS_GET_VERSION = 1
    c_nvmlGpmMetricsGet_t = FakeMetricsGet
    gpus: list[FakeGpu]
    samples_allocated: list[FakeGpmSample]

    def _enter(self, symbol: str, handle: Any = None) -> FakeGpu:
        raise NotImplementedError

    def _raise(self, code: int) -> None:
        raise NotImplementedError

    def nvmlGpmQueryDeviceSupport(self, h: FakeHandle) -> types.SimpleNamespace:
        gpu = self._enter("nvmlGpmQueryDeviceSupport", h)
        return types.SimpleNamespace(version=1, isSupportedDevice=int(gpu.gpm_supported))

    def nvmlGpmSampleAlloc(self) -> FakeGpmSample:
        self._enter("nvmlGpmSampleAlloc")
        sample = FakeGpmSample()
        self.samples_allocated.append(sample)
        return sample

    def nvmlGpmSampleFree(self, sample: FakeGpmSample) -> None:
        self._enter("nvmlGpmSampleFree")
        sample.freed = True

    def nvmlGpmSampleGet(self, h: FakeHandle, sample: FakeGpmSample) -> FakeGpmSample:
        gpu = self._enter("nvmlGpmSampleGet", h)
        if not gpu.gpm_supported:
            self._raise(NOT_SUPPORTED)
        sample.taken = (h.index, None, dict(gpu.gpm))
        return sample

    def nvmlGpmMigSampleGet(self, h: FakeHandle, gpu_instance: int,
                            sample: FakeGpmSample) -> FakeGpmSample:
        gpu = self._enter("nvmlGpmMigSampleGet", h)
        values = gpu.gpm_instances.get(gpu_instance)
        if values is None:  # MIG off, or no such GPU instance
            self._raise(INVALID_ARGUMENT)
        sample.taken = (h.index, gpu_instance, dict(values or {}))
        return sample

    def nvmlGpmMetricsGet(self, request: FakeMetricsGet) -> FakeMetricsGet:
        self._enter("nvmlGpmMetricsGet")
        first, second = request.sample1, request.sample2
        if (first is second or first.taken is None or second.taken is None or first.freed
                or second.freed or first.taken[:2] != second.taken[:2]):
            self._raise(INVALID_ARGUMENT)
        index, _, values = second.taken
        unsupported = self.gpus[index].gpm_unsupported
        for slot in request.metrics[:request.numMetrics]:
            slot.nvmlReturn = NOT_SUPPORTED if slot.metricId in unsupported else 0
            slot.value = 0.0 if slot.nvmlReturn else values.get(slot.metricId, 0.0)
        return request

    def nvmlDeviceGetNvLinkState(self, h: FakeHandle, link: int) -> int:
        gpu = self._enter("nvmlDeviceGetNvLinkState", h)
        if not gpu.nvlink:
            self._raise(NOT_SUPPORTED)
        return 1
