"""A fake ``pynvml`` whose calls take as long as they do on an NVIDIA H200.

``SlowNvml(fake)`` wraps any pynvml-like module (normally ``tests.sources.fake_nvml.FakeNvml``)
and delays each ``nvml*`` function by its median latency measured on an H200 (driver
580.159.04):

- the expensive calls sleep (``time.sleep`` releases the GIL, as the real ctypes call does):
  per-process utilisation ~1.8 ms, total energy ~2.8 ms, PCIe throughput ~20.8 ms (its 20 ms
  sampling window), process lists 14-36 µs, MIG mode and the fan probe ~0.1 ms;
- cheap calls (~1-7 µs) spin on the clock instead: a sleep that short takes ~60 µs on Linux,
  and holding the GIL for them is the pessimistic choice for parallel reads.

``latency`` overrides or adds entries (seconds, keyed by the Python function name);
``scale`` multiplies every latency. ``calls_in_flight`` and ``max_in_flight`` count how many
delayed calls overlap, so tests can see that reads of different GPUs ran concurrently.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable, Mapping
from typing import Any

#: Median seconds per call on the H200; anything not listed costs ``DEFAULT_LATENCY``.
H200_LATENCY: Mapping[str, float] = {
    "nvmlDeviceGetProcessUtilization": 1809e-6,
    "nvmlDeviceGetProcessesUtilizationInfo": 1814e-6,
    "nvmlDeviceGetTotalEnergyConsumption": 2759e-6,
    "nvmlDeviceGetPcieThroughput": 20758e-6,
    "nvmlDeviceGetComputeRunningProcesses_v3": 36e-6,
    "nvmlDeviceGetComputeRunningProcesses_v2": 36e-6,
    "nvmlDeviceGetComputeRunningProcesses": 36e-6,
    "nvmlDeviceGetGraphicsRunningProcesses_v3": 14e-6,
    "nvmlDeviceGetGraphicsRunningProcesses_v2": 14e-6,
    "nvmlDeviceGetGraphicsRunningProcesses": 14e-6,
    "nvmlDeviceGetMigMode": 108e-6,
    "nvmlDeviceGetFanSpeed": 109e-6,
    "nvmlDeviceGetMemoryInfo": 6.9e-6,
    "nvmlDeviceGetName": 2.6e-6,
    "nvmlDeviceGetUUID": 2.5e-6,
    "nvmlInit": 11e-3,
}
DEFAULT_LATENCY = 1.5e-6
#: Below this a delay spins (holding the GIL); at or above it, it sleeps (releasing it).
SLEEP_FROM = 100e-6


def _delay(seconds: float) -> None:
    if seconds >= SLEEP_FROM:
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class SlowNvml(types.ModuleType):
    """``inner`` with every ``nvml*`` function delayed as on an H200 (see the module doc)."""

    def __init__(self, inner: types.ModuleType, *, latency: Mapping[str, float] | None = None,
                 scale: float = 1.0) -> None:
        super().__init__("pynvml")
        self.__file__ = getattr(inner, "__file__", __file__)
        self._inner = inner
        self._latency = {**H200_LATENCY, **(latency or {})}
        self._scale = scale
        self._wrapped: dict[str, Callable[..., Any]] = {}
        self._lock = threading.Lock()
        self.calls_in_flight = 0
        self.max_in_flight = 0

    def latency_of(self, name: str) -> float:
        """Seconds a call of ``name`` is delayed by."""
        return self._latency.get(name, DEFAULT_LATENCY) * self._scale

    def __getattr__(self, name: str) -> Any:
        # Only called for names not found on self: everything of the wrapped module.
        value = getattr(self._inner, name)
        if not name.startswith("nvml") or not callable(value) or isinstance(value, type):
            return value
        wrapped = self._wrapped.get(name)
        if wrapped is None:
            wrapped = self._wrap(name, value, self.latency_of(name))
            self._wrapped[name] = wrapped
        return wrapped

    def _wrap(self, name: str, fn: Callable[..., Any], seconds: float) -> Callable[..., Any]:
        if seconds < SLEEP_FROM:
            def cheap(*args: Any, **kwargs: Any) -> Any:
                _delay(seconds)
                return fn(*args, **kwargs)
            return cheap

        def slow(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.calls_in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.calls_in_flight)
            try:
                _delay(seconds)
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    self.calls_in_flight -= 1

        slow.__name__ = name
        return slow
