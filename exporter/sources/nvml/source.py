"""The NVML source: real GPUs through NVIDIA's management library (nvidia-ml-py's ``pynvml``).

``start`` initialises NVML once and reads each GPU's static identity; ``collect`` reads the
enabled field groups of every GPU. One GPU that is lost or refuses a handle is reported
``up=False`` with its error and retried next collection; the others are unaffected. Fields a
GPU does not support are asked for once and then left ``None``. Only when NVML as a whole stops
answering (uninitialised, driver unloaded or upgraded) does ``collect`` raise
``SourceUnavailable`` so that the scheduler re-initialises.

Each GPU is read on its own thread (``workers``; inline when there is one GPU), so the slow
calls of different GPUs overlap and a GPU whose call hangs is answered ``up=False`` after
``gpu_timeout`` while the others are served fresh; ``hung_gpus`` tells the scheduler which.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import logging
import socket
import threading
import time
from types import ModuleType
from typing import Any

from exporter.catalogue.metrics import Group
from exporter.health import EventCounts
from exporter.snapshot import GpuReading, Snapshot
from exporter.sources.base import SourceUnavailable, boot_time
from exporter.sources.nvml.device import GpuState, placeholder_identity
from exporter.sources.nvml.errors import (
    FATAL_CODES,
    GPU_DOWN_KINDS,
    LIBRARY_NOT_FOUND,
    GpuDown,
    NvmlFatal,
    describe,
)
from exporter.sources.nvml.events import DEFAULT_WAIT_MS, EVENT_FUNCTIONS, EventWaiter
from exporter.sources.nvml.mig import MigReader
from exporter.sources.nvml.reader import GpuReader, NvmlCalls, read_identity
from exporter.sources.nvml.workers import Failed, GpuWorkers, Hung

log = logging.getLogger(__name__)

_NOT_FOUND_HINT = (
    "install the NVIDIA driver (libnvidia-ml.so.1) and nvidia-ml-py, or run the container with "
    "the NVIDIA runtime; use --source simulated for a demo without GPUs"
)


def cuda_version_text(value: int) -> str:
    """NVML's CUDA driver version integer (e.g. 12040) as ``"12.4"``."""
    return f"{value // 1000}.{(value % 1000) // 10}"


def shuffles_process_structs(driver_version: str | None) -> bool:
    """True for drivers 535.43-535.86, whose ``_v3`` process lists come back shuffled."""
    parts = (driver_version or "").split(".")
    if len(parts) < 2 or parts[0] != "535" or not parts[1].isdigit():
        return False
    return 43 <= int(parts[1]) <= 86


def _binding_version() -> str | None:
    try:
        return importlib.metadata.version("nvidia-ml-py")
    except importlib.metadata.PackageNotFoundError:
        return None


#: What one GPU's read hands back: the reading, its error counts, and a fatal NVML message.
_GpuResult = tuple[GpuReading, dict[str, int], str | None]
#: Seconds one GPU's reads may take before it is answered down for that collection.
DEFAULT_GPU_TIMEOUT = 2.5


class NvmlSource:
    """``Source`` implementation over NVML. ``nvml`` replaces ``import pynvml`` (tests)."""

    name = "nvml"

    def __init__(self, *, hostname: str | None = None, nvml: ModuleType | None = None,
                 gpu_timeout: float = DEFAULT_GPU_TIMEOUT, watch_events: bool = True,
                 event_wait_ms: int = DEFAULT_WAIT_MS) -> None:
        self._hostname = hostname or socket.gethostname()
        self.gpu_timeout = gpu_timeout
        self._injected = nvml
        self._watch_events = watch_events  # run the XID event waiter (group xid)
        self._event_wait_ms = event_wait_ms
        self._events: EventWaiter | None = None
        self._mig: MigReader | None = None
        self._nvml: ModuleType | None = None
        self._calls: NvmlCalls | None = None
        self._gpus: list[GpuState] = []
        self._throttle_cache: dict[int, dict[str, float]] = {}
        self._started = False
        self._started_at: float | None = None  # Unix seconds of the last start
        self._booted_at: float | None = None  # the host's boot (NVML's counters' zero)
        self._workers: GpuWorkers[_GpuResult] = GpuWorkers(gpu_timeout)
        self._lock = threading.Lock()  # start/close may come from another thread than collect
        self.driver_version: str | None = None
        self.cuda_driver_version: str | None = None
        self.nvml_version: str | None = None
        self.binding_version: str | None = None

    # --- diagnostics (used by scripts/gpu and tests) -----------------------------------------
    @property
    def started(self) -> bool:
        """True between a successful ``start`` and ``close`` (or a fatal collection)."""
        return self._started

    def unsupported_fields(self) -> dict[int, frozenset[str]]:
        """Per GPU index, the fields found unsupported so far (and no longer asked for)."""
        return {gpu.index: frozenset(gpu.unsupported) for gpu in self._gpus}

    def process_list_functions(self) -> dict[str, str | None]:
        """The process-list call in use for compute and graphics (None: none works)."""
        if self._calls is None:
            return {}
        return {"compute": self._calls.compute.function_name,
                "graphics": self._calls.graphics.function_name}

    # --- Source protocol ---------------------------------------------------------------------
    def start(self) -> None:
        """Initialise NVML and read static identities (idempotent).

        Raises:
            SourceUnavailable: pynvml cannot be imported, libnvidia-ml is missing, or NVML
                init / device count failed; the message carries NVML's error text.
        """
        with self._lock:
            if self._started:
                return
            nvml = self._load()
            try:
                nvml.nvmlInit()
            except Exception as exc:
                if getattr(exc, "value", None) == LIBRARY_NOT_FOUND:
                    raise SourceUnavailable(
                        f"NVML library not found: {describe(exc)}; {_NOT_FOUND_HINT}") from exc
                raise SourceUnavailable(f"NVML init failed: {describe(exc)}") from exc
            try:
                self._read_system(nvml)
                count = int(nvml.nvmlDeviceGetCount())
            except Exception as exc:
                self._shutdown(nvml)
                raise SourceUnavailable(
                    f"NVML initialised but could not count GPUs: {describe(exc)}") from exc
            try:
                calls = NvmlCalls(nvml)
            except AttributeError as exc:  # pynvml from nvidia-ml-py3 or another old fork
                self._shutdown(nvml)
                raise SourceUnavailable(
                    f"the pynvml at {getattr(nvml, '__file__', '?')} is not nvidia-ml-py "
                    f"({exc}); pip uninstall pynvml nvidia-ml-py3 && pip install nvidia-ml-py"
                ) from exc
            self._nvml = nvml
            self._calls = calls
            self._mig = MigReader(nvml)
            self._workers = GpuWorkers(self.gpu_timeout)  # a hung thread of a past start stays
            self._gpus = []
            for index in range(count):
                gpu = GpuState(index=index, identity=placeholder_identity(index))
                self._acquire(gpu)
                self._gpus.append(gpu)
            self._started = True
            self._started_at, self._booted_at = time.time(), boot_time()
            if self._watch_events:
                self._events = self._start_events(nvml)
            if shuffles_process_structs(self.driver_version):
                log.warning("driver %s writes garbled process lists (fixed in 535.104.05): "
                            "suspicious entries will be dropped; upgrade the driver",
                            self.driver_version)
            log.info(
                "NVML %s started: driver %s, CUDA %s, nvidia-ml-py %s (%s), %d GPU(s): %s",
                self.nvml_version, self.driver_version, self.cuda_driver_version,
                self.binding_version, getattr(nvml, "__file__", "?"), count,
                ", ".join(f"{g.index}={g.identity.name}" if g.error is None
                          else f"{g.index}=({g.error})" for g in self._gpus),
            )

    def collect(self, groups: frozenset[Group]) -> Snapshot:
        """Read the rows of ``groups`` from every GPU once.

        Raises:
            SourceUnavailable: not started, or every GPU answered that NVML itself is gone
                (the source is then stopped and ``start`` must succeed again).
        """
        calls = self._calls
        if not self._started or calls is None:
            raise SourceUnavailable("NVML source is not started")
        taken_at = time.time()
        began = time.perf_counter()
        errors: dict[str, int] = {}
        # The XID waiter's counts, taken once: every GPU of this collection sees the same ones.
        events = None if self._events is None else self._events.counts()
        # One thread per GPU (inline for one GPU): slow calls overlap, a hung GPU hangs alone.
        reads = {gpu.index: functools.partial(self._read_gpu, calls, gpu, groups, events)
                 for gpu in self._gpus}
        readings: list[GpuReading] = []
        fatal: list[str] = []
        for gpu, outcome in zip(self._gpus, self._workers.run(reads).values(), strict=True):
            if isinstance(outcome, Hung):
                if outcome.new:  # counted once per hang, however long it lasts
                    log.warning("GPU %d: NVML call has not returned after %.1fs; reporting the "
                                "GPU down until it does", gpu.index, outcome.seconds)
                    errors["gpu_timeout"] = errors.get("gpu_timeout", 0) + 1
                readings.append(GpuReading(identity=gpu.identity, up=False, error=(
                    f"NVML call has not returned for {outcome.seconds:.1f}s")))
                continue
            if isinstance(outcome, Failed):  # _read_gpu maps every error; a bug lands here
                log.error("GPU %d: reading failed: %r", gpu.index, outcome.error)
                reading, gpu_errors, fatal_message = (
                    GpuReading(identity=gpu.identity, up=False,
                               error=f"unexpected error: {outcome.error!r}"),
                    {"nvml_unexpected": 1}, None)
            else:
                reading, gpu_errors, fatal_message = outcome.value
            for kind, n in gpu_errors.items():
                errors[kind] = errors.get(kind, 0) + n
            if fatal_message is not None:
                fatal.append(fatal_message)
            readings.append(reading)
        if self._gpus and len(fatal) == len(self._gpus):
            self.close()
            raise SourceUnavailable(f"NVML stopped working: {fatal[0]}; re-initialising")
        return Snapshot(
            source=self.name,
            hostname=self._hostname,
            taken_at=taken_at,
            duration_seconds=time.perf_counter() - began,
            driver_version=self.driver_version,
            cuda_driver_version=self.cuda_driver_version,
            nvml_version=self.nvml_version,
            gpus=tuple(readings),
            errors=errors,
            booted_at=self._booted_at,
            started_at=self._started_at,
        )

    def _read_gpu(self, calls: NvmlCalls, gpu: GpuState, groups: frozenset[Group],
                  events: EventCounts | None) -> _GpuResult:
        """One GPU's reading (never raises: every failure is a down reading)."""
        errors: dict[str, int] = {}  # per GPU: reads of different GPUs run concurrently
        reader = GpuReader(calls, errors, self._throttle_cache, mig=self._mig, events=events)
        if gpu.handle is None:
            code = self._acquire(gpu)
            if gpu.handle is None:
                reader.count(GPU_DOWN_KINDS.get(code or 0, "gpu_open_failed"))
                return (GpuReading(identity=gpu.identity, up=False, error=gpu.error), errors,
                        (gpu.error or "") if code in FATAL_CODES else None)
        try:
            return reader.read(gpu, groups), errors, None
        except GpuDown as down:
            log.warning("GPU %d down: %s", gpu.index, down.message)
            reader.count(down.kind)
            gpu.handle = None  # re-acquired next collection
            gpu.error = down.message
            return GpuReading(identity=gpu.identity, up=False, error=down.message), errors, None
        except NvmlFatal as broken:
            reader.count("nvml_unavailable")
            return (GpuReading(identity=gpu.identity, up=False,
                               error=f"NVML unavailable: {broken.message}"), errors,
                    broken.message)
        except Exception as exc:  # an odd NVML answer must not hide the other GPUs
            log.exception("GPU %d: unexpected error while reading", gpu.index)
            reader.count("nvml_unexpected")
            return (GpuReading(identity=gpu.identity, up=False,
                               error=f"unexpected error: {exc!r}"), errors, None)

    def hung_gpus(self) -> dict[int, float]:
        """GPU index -> seconds its current read has run, for reads past ``gpu_timeout``."""
        return {index: seconds for index, seconds in self._workers.busy().items()
                if seconds >= self.gpu_timeout}

    def close(self) -> None:
        """Shut NVML down (idempotent); ``start`` may be called again afterwards.

        While a GPU's read is stuck in NVML, the library is left initialised: shutting it down
        under a running call is not safe.
        """
        with self._lock:
            if self._events is not None:  # its threads first: they use NVML until they stop
                took = self._events.stop()
                log.info("XID event waiter stopped in %.0f ms", took * 1000)
                self._events = None
            self._workers.close()
            stuck = self._workers.busy()
            if stuck:
                log.warning("NVML left initialised: reads of GPU(s) %s have not returned",
                            ", ".join(map(str, sorted(stuck))))
            elif self._nvml is not None and self._started:
                if self._calls is not None:
                    for gpu in self._gpus:
                        self._calls.gpm.release(gpu.gpm)
                self._shutdown(self._nvml)
            self._started = False
            self._gpus = []
            self._calls = None

    # --- helpers -----------------------------------------------------------------------------
    def _start_events(self, nvml: ModuleType) -> EventWaiter | None:
        """The XID event waiter, running; None when the binding or NVML cannot do events."""
        if not all(hasattr(nvml, name) for name in EVENT_FUNCTIONS):
            log.info("this pynvml has no NVML event functions: XID errors are not counted "
                     "(install a current nvidia-ml-py)")
            return None
        waiter = EventWaiter(nvml, wait_ms=self._event_wait_ms)
        try:
            waiter.start()
        except Exception as exc:  # events are an extra: the GPUs are still read
            log.warning("cannot start the XID event waiter: %s; XID errors are not counted",
                        describe(exc))
            return None
        return waiter

    def _load(self) -> ModuleType:
        if self._injected is not None:
            return self._injected
        try:
            module = importlib.import_module("pynvml")
        except ImportError as exc:
            raise SourceUnavailable(
                f"NVML library not found: cannot import pynvml ({exc}); {_NOT_FOUND_HINT}"
            ) from exc
        self.binding_version = _binding_version()
        log.debug("pynvml from %s (nvidia-ml-py %s)", getattr(module, "__file__", "?"),
                  self.binding_version)
        return module

    def _read_system(self, nvml: ModuleType) -> None:
        self.driver_version = _text(nvml, "nvmlSystemGetDriverVersion")
        self.nvml_version = _text(nvml, "nvmlSystemGetNVMLVersion")
        cuda = _call(nvml, "nvmlSystemGetCudaDriverVersion_v2")
        if cuda is None:
            cuda = _call(nvml, "nvmlSystemGetCudaDriverVersion")
        self.cuda_driver_version = None if cuda is None else cuda_version_text(int(cuda))

    def _acquire(self, gpu: GpuState) -> int | None:
        """Open the handle (and read the identity once); on failure record why.

        Returns the NVML error code of the failure, or None on success.
        """
        nvml = self._nvml
        assert nvml is not None
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(gpu.index)
            if not gpu.identity_known:
                gpu.identity = read_identity(nvml, gpu.index, handle)
                gpu.identity_known = True
        except Exception as exc:  # NVMLError, a symbol mismatch, or an odd answer
            first = gpu.error is None  # warn when a GPU goes away, not on every retry
            gpu.handle = None
            gpu.error = f"cannot open GPU {gpu.index}: {describe(exc)}"
            log.log(logging.WARNING if first else logging.DEBUG, "%s", gpu.error)
            code = getattr(exc, "value", None)
            return code if isinstance(code, int) else None
        if gpu.error is not None:
            log.info("GPU %d answers again", gpu.index)
        if self._mig is not None:
            self._mig.forget(gpu.index)  # a new handle (after a reset): MIG mode may differ
        gpu.handle = handle
        gpu.error = None
        gpu.ecc_read = None  # a reset zeroes the volatile ECC counts: read the lifetime ones again
        gpu.gpm.forget()  # a reset may change GPM support; samples of the old handle are void
        return None

    @staticmethod
    def _shutdown(nvml: ModuleType) -> None:
        try:
            nvml.nvmlShutdown()
        except Exception as exc:  # shutting down a broken library must not fail the caller
            log.debug("nvmlShutdown failed: %s", describe(exc))


def _call(nvml: ModuleType, name: str) -> Any:
    fn = getattr(nvml, name, None)
    if fn is None:
        return None
    try:
        return fn()
    except Exception as exc:  # optional system facts: absent on old drivers
        log.debug("%s unavailable: %s", name, describe(exc))
        return None


def _text(nvml: ModuleType, name: str) -> str | None:
    value = _call(nvml, name)
    return None if value is None else str(value)
