"""Publish PyTorch's CUDA caching-allocator statistics for gpu-exporter, from inside a process.

NVML (and so nvidia-smi and every GPU exporter) sees what the driver handed a process: the CUDA
context, library workspaces and PyTorch's cache together. Only the process itself knows how
much of that its tensors use. This module writes, every few seconds and at exit, one small JSON
file per process into a directory shared with gpu-exporter, which joins it to the process by
pid (checking the pid's start time and the file owner's uid).

Enable it with one line::

    import gpu_exporter_torch; gpu_exporter_torch.start()

or with no code change: ``gpu-exporter-run python train.py`` (see ``gpu_exporter_torch.run``),
or ``GPU_EXPORTER_TORCH=1`` plus ``PYTHONPATH=<hook_dir()>`` (what the launcher sets).

Promises to the training process:

- Standard library only; torch is never imported here (it is read from ``sys.modules`` if the
  program imported it), so a process without torch publishes nothing and pays nothing.
- CUDA is never initialised: nothing is read until ``torch.cuda.is_initialized()`` is true.
- Errors never propagate: the first one is printed once to stderr, later ones are counted in
  ``Publisher.errors`` and otherwise ignored.
- One sample costs one ``torch.cuda.memory_stats(device)`` per used device (~0.15 ms on an
  H200 host) every ``interval`` seconds (default 5).

Environment: ``GPU_EXPORTER_TORCH_DIR`` (default ``/run/gpu-exporter/torch``),
``GPU_EXPORTER_TORCH_INTERVAL`` (seconds, default 5, at least 0.5).

File: ``<dir>/<pid>-<start ticks>-<pid namespace inode>.json``, written to a temporary name
and renamed, so a reader never sees half a file. ``pid`` and ``start ticks`` are the process's
own ``/proc/self/stat`` values (its PID namespace's pid; field 22, clock ticks since boot).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "DEFAULT_DIR",
    "DEFAULT_INTERVAL",
    "ENV_DIR",
    "ENV_ENABLE",
    "ENV_INTERVAL",
    "FORMAT_VERSION",
    "STAT_KEYS",
    "Publisher",
    "hook_dir",
    "read_self_stat",
    "sample",
    "start",
    "stop",
]

ENV_ENABLE = "GPU_EXPORTER_TORCH"
ENV_DIR = "GPU_EXPORTER_TORCH_DIR"
ENV_INTERVAL = "GPU_EXPORTER_TORCH_INTERVAL"
DEFAULT_DIR = "/run/gpu-exporter/torch"
DEFAULT_INTERVAL = 5.0
MIN_INTERVAL = 0.5
#: Bumped when the file's meaning changes; the exporter ignores versions it does not know.
FORMAT_VERSION = 1

#: Published field -> ``torch.cuda.memory_stats()`` key (torch >= 1.x native allocator).
STAT_KEYS: Mapping[str, str] = {
    "allocated_bytes": "allocated_bytes.all.current",
    "reserved_bytes": "reserved_bytes.all.current",
    "active_bytes": "active_bytes.all.current",
    "inactive_split_bytes": "inactive_split_bytes.all.current",
    "peak_allocated_bytes": "allocated_bytes.all.peak",
    "alloc_retries": "num_alloc_retries",
    "ooms": "num_ooms",
}
_STARTTIME_INDEX = 19  # field 22 of /proc/<pid>/stat, counted from the field after ")"


def read_self_stat(path: str = "/proc/self/stat") -> tuple[int, int]:
    """(pid, start time in clock ticks since boot) of this process, from procfs.

    Raises:
        OSError: procfs is not readable. ValueError: the line has no start time.
    """
    with open(path, "rb") as handle:
        data = handle.read(4096)
    pid = int(data[: data.index(b" ")])
    fields = data[data.rindex(b")") + 1 :].split()
    return pid, int(fields[_STARTTIME_INDEX])


def _pid_namespace() -> int:
    """Inode of this process's PID namespace (0 where it cannot be read)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def hook_dir() -> str:
    """The directory whose ``sitecustomize.py`` starts the publisher when ``GPU_EXPORTER_TORCH=1``
    (put it first on ``PYTHONPATH``)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_hook")


def sample(torch: Any) -> list[dict[str, Any]]:
    """One reading per CUDA device this process's allocator has touched; [] before CUDA init.

    ``torch`` is the imported torch module. Never initialises CUDA: devices are only asked for
    when ``torch.cuda.is_initialized()`` (False in a forked child of a CUDA process too).
    """
    cuda = torch.cuda
    if not cuda.is_initialized():
        return []
    devices: list[dict[str, Any]] = []
    for index in range(cuda.device_count()):
        stats = cuda.memory_stats(index)
        if not stats.get("reserved_bytes.all.peak") and not stats.get("num_ooms"):
            continue  # never used here: no context to describe (and none to create)
        device: dict[str, Any] = {"index": index, "uuid": _uuid(cuda, index)}
        for field, key in STAT_KEYS.items():
            value = stats.get(key)
            if isinstance(value, int):
                device[field] = value
        devices.append(device)
    return devices


def _uuid(cuda: Any, index: int) -> str | None:
    """``GPU-<uuid>`` as NVML spells it, so the exporter can tell this device from others even
    under ``CUDA_VISIBLE_DEVICES`` (torch's index is not NVML's). None if torch lacks it."""
    uuid = getattr(cuda.get_device_properties(index), "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


class Publisher:
    """Writes this process's allocator statistics to ``directory`` every ``interval`` seconds.

    ``start`` runs a daemon thread and registers a last write at exit. ``publish_once`` does
    one write now (also usable without the thread). Never raises once constructed.
    """

    def __init__(
        self,
        directory: str = DEFAULT_DIR,
        interval: float = DEFAULT_INTERVAL,
        *,
        clock: Callable[[], float] = time.time,
        warn: Callable[[str], object] | None = None,
    ) -> None:
        self.directory = directory
        self.interval = max(MIN_INTERVAL, float(interval))
        self.errors = 0
        self.writes = 0
        self._clock = clock
        self._warn = warn or _stderr_warning
        self._warned = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._identity: tuple[int, int, int] | None = None

    # --- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Start the publishing thread (idempotent) and the final write at exit."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name="gpu-exporter-torch", daemon=True
        )
        self._thread.start()

    def stop(self, *, final: bool = True) -> None:
        """Stop the thread; with ``final`` publish one last time. Never raises."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)
        if final:
            self.publish_once()

    def _run(self) -> None:
        self.publish_once()
        while not self._stop.wait(self.interval):
            self.publish_once()

    def after_fork_in_child(self) -> None:
        """Reset in a forked child: new pid, no thread, a fresh lock. The child publishes
        its own file only if it initialises CUDA itself (a forked CUDA parent's child cannot).
        """
        self._lock = threading.Lock()
        self._stop = threading.Event()  # the parent's thread may have held its lock
        self._identity = None
        was_running = self._thread is not None
        self._thread = None
        if was_running:
            self.start()

    # --- one write --------------------------------------------------------------------------
    def publish_once(self) -> bool:
        """Sample and write the file now. True if written; never raises."""
        torch = sys.modules.get("torch")
        if torch is None:
            return False
        try:
            with self._lock:
                return self._publish(torch)
        except Exception as err:  # never let a statistics file hurt training
            self.errors += 1
            if not self._warned:
                self._warned = True
                self._warn(
                    f"gpu_exporter_torch: cannot publish allocator statistics to "
                    f"{self.directory}: {err!r} (further errors are not reported)"
                )
            return False

    def _publish(self, torch: Any) -> bool:
        devices = sample(torch)
        if not devices:
            return False
        pid, start_ticks, pid_ns = self._identity_of_self()
        document = {
            "format": FORMAT_VERSION,
            "pid": pid,
            "start_ticks": start_ticks,
            "pid_namespace": pid_ns,
            "uid": os.getuid(),
            "time": round(self._clock(), 3),
            "interval_seconds": self.interval,
            "torch_version": str(getattr(torch, "__version__", "")),
            "devices": devices,
        }
        name = f"{pid}-{start_ticks}-{pid_ns}.json"
        _write_atomically(self.directory, name, json.dumps(document, separators=(",", ":")))
        self.writes += 1
        return True

    def _identity_of_self(self) -> tuple[int, int, int]:
        if self._identity is None or self._identity[0] != os.getpid():
            pid, start_ticks = read_self_stat()
            self._identity = (pid, start_ticks, _pid_namespace())
        return self._identity


def _write_atomically(directory: str, name: str, text: str) -> None:
    """Write ``directory/name`` via a temporary file and a rename (readers see old or new).

    The temporary file is created with O_EXCL|O_NOFOLLOW, so a planted symlink or file under
    that name is never written through. Mode 0644: the exporter (maybe another uid) reads it.
    """
    temporary = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(temporary, flags, 0o644)
    except FileExistsError:  # left by a crash of this pid's previous life: ours to replace
        os.unlink(temporary)
        fd = os.open(temporary, flags, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, os.path.join(directory, name))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _stderr_warning(message: str) -> None:
    with contextlib.suppress(Exception):  # e.g. stderr closed by a daemonised trainer
        sys.stderr.write(message + "\n")


# --- module-level switch ----------------------------------------------------------------------
_publisher: Publisher | None = None
_fork_hook_registered = False


def start(directory: str | None = None, interval: float | None = None) -> Publisher | None:
    """Start publishing from this process (idempotent; later calls return the same publisher).

    ``directory`` and ``interval`` default to ``$GPU_EXPORTER_TORCH_DIR`` and
    ``$GPU_EXPORTER_TORCH_INTERVAL``, then ``/run/gpu-exporter/torch`` and 5 s. Returns None
    (after one warning on stderr) only if the settings are unusable; never raises.
    """
    global _publisher, _fork_hook_registered  # noqa: PLW0603 - one publisher per process
    if _publisher is not None:
        _publisher.start()
        return _publisher
    try:
        directory = directory or os.environ.get(ENV_DIR) or DEFAULT_DIR
        interval = float(os.environ.get(ENV_INTERVAL) or DEFAULT_INTERVAL) if interval is None \
            else float(interval)
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval}")
    except ValueError as err:
        _stderr_warning(f"gpu_exporter_torch: not started: {err}")
        return None
    _publisher = Publisher(directory, interval)
    _publisher.start()
    atexit.register(_at_exit, _publisher, os.getpid())
    if not _fork_hook_registered:
        _fork_hook_registered = True
        os.register_at_fork(after_in_child=_after_fork_in_child)
    return _publisher


def stop() -> None:
    """Stop publishing (with a last write). Never raises."""
    global _publisher
    publisher, _publisher = _publisher, None
    if publisher is not None:
        publisher.stop()


def _at_exit(publisher: Publisher, pid: int) -> None:
    # Inherited by forked children (multiprocessing workers exit via os._exit, others may not):
    # only the process that started publishing writes its last numbers.
    if os.getpid() == pid and publisher is _publisher:
        publisher.stop()


def _after_fork_in_child() -> None:
    publisher = _publisher
    if publisher is None:
        return
    publisher.after_fork_in_child()
    atexit.register(_at_exit, publisher, os.getpid())
