"""The files ``gpu_exporter_torch`` publishes: the shared directory they go in, and their JSON
format, parsed and checked.

One document per process: its pid, start time and pid namespace as the process sees them,
the publisher's interval, and per GPU (by NVML's uuid) the caching allocator's figures.
Values must be non-negative integers below 2**63, and a file holds at most ``MAX_DEVICES``
devices; anything else is a ``TorchFileError`` naming the field. Whether a valid file may
speak for a host process is the reader's trust rule (``exporter.attribution.torchstats``).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass

#: The file format this reader understands (``gpu_exporter_torch.FORMAT_VERSION``).
FORMAT_VERSION = 1
MAX_DEVICES = 64
_MAX_VALUE = 2**63 - 1


@dataclass(frozen=True, slots=True)
class TorchMemory:
    """PyTorch caching-allocator figures of one process on one GPU (``torch.cuda.memory_stats``).

    ``allocated`` <= ``reserved``: tensors live in memory the allocator reserved from the
    driver; NVML's per-process figure adds the CUDA context and libraries on top of
    ``reserved``. Counters count since the process started (or reset its statistics).
    """

    allocated_bytes: int
    reserved_bytes: int
    active_bytes: int | None = None
    inactive_split_bytes: int | None = None
    peak_allocated_bytes: int | None = None
    alloc_retries: int | None = None
    ooms: int | None = None


@dataclass(frozen=True, slots=True)
class TorchFile:
    """One publisher file that passed validation (owner uid from ``fstat``, not from the file)."""

    path: str
    pid: int  # in the publisher's own PID namespace
    start_ticks: int
    pid_namespace: int  # inode, 0 if the publisher could not read it
    owner_uid: int
    mtime: float
    devices: tuple[tuple[str, TorchMemory], ...]  # (GPU uuid as NVML spells it, figures)
    interval: float = 0.0  # the publisher's seconds between writes (0: not given)

    def device(self, uuid: str) -> TorchMemory | None:
        """The figures for the GPU with this NVML uuid, or None."""
        return next((memory for key, memory in self.devices if key == uuid), None)


class TorchFileError(ValueError):
    """A publisher file is malformed (message names what is wrong)."""


def parse_document(data: bytes) -> tuple[int, int, int, float, tuple[
        tuple[str, TorchMemory], ...]]:
    """(pid, start ticks, pid namespace, interval, devices) from a file's bytes.

    Raises:
        TorchFileError: not JSON, unknown format, or a field of the wrong type or range.
    """
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as err:
        raise TorchFileError(f"not JSON: {err}") from None
    if not isinstance(document, dict):
        raise TorchFileError("not a JSON object")
    if document.get("format") != FORMAT_VERSION:
        raise TorchFileError(f"unknown format {document.get('format')!r}")
    pid = _count(document, "pid")
    start_ticks = _count(document, "start_ticks")
    pid_namespace = _count(document, "pid_namespace")
    interval = document.get("interval_seconds", 0.0)
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) \
            or not 0 <= interval <= 3600:
        raise TorchFileError("interval_seconds must be a number in 0..3600")
    devices = document.get("devices")
    if not isinstance(devices, list) or len(devices) > MAX_DEVICES:
        raise TorchFileError(f"devices must be a list of at most {MAX_DEVICES}")
    parsed: list[tuple[str, TorchMemory]] = []
    for device in devices:
        if not isinstance(device, dict):
            raise TorchFileError("a device is not an object")
        uuid = device.get("uuid")
        if uuid is None:
            continue  # torch too old to name its devices: cannot be matched to a GPU
        if not isinstance(uuid, str) or not 0 < len(uuid) <= 96 or not uuid.isprintable():
            raise TorchFileError("bad device uuid")
        memory = TorchMemory(
            allocated_bytes=_count(device, "allocated_bytes"),
            reserved_bytes=_count(device, "reserved_bytes"),
            active_bytes=_optional_count(device, "active_bytes"),
            inactive_split_bytes=_optional_count(device, "inactive_split_bytes"),
            peak_allocated_bytes=_optional_count(device, "peak_allocated_bytes"),
            alloc_retries=_optional_count(device, "alloc_retries"),
            ooms=_optional_count(device, "ooms"),
        )
        parsed.append((uuid, memory))
    return pid, start_ticks, pid_namespace, float(interval), tuple(parsed)


def _optional_count(mapping: dict[str, object], key: str) -> int | None:
    return None if mapping.get(key) is None else _count(mapping, key)


def _count(mapping: dict[str, object], key: str) -> int:
    value = mapping.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_VALUE:
        raise TorchFileError(f"{key} must be an integer in 0..2**63-1, got {value!r}")
    return value


def ensure_directory(directory: str) -> Iterable[str]:
    """Create the shared directory (mode 1777, like /tmp) if missing, and set that mode if the
    exporter owns it; returns warnings for the log. Never raises.

    1777: every user's publisher can create its file; the sticky bit stops users from replacing
    or deleting each other's files.
    """
    warnings: list[str] = []
    try:
        os.makedirs(directory, exist_ok=True)
        info = os.stat(directory)
        wanted = stat.S_ISVTX | 0o777
        if stat.S_IMODE(info.st_mode) != wanted:
            if info.st_uid == os.geteuid():
                os.chmod(directory, wanted)
            else:
                warnings.append(
                    f"{directory} has mode {stat.S_IMODE(info.st_mode):o} and is not the "
                    "exporter's to change: publishers of other users may not be able to write "
                    "there (chmod 1777 it)"
                )
    except OSError as err:
        warnings.append(f"cannot prepare {directory}: {err.strerror or err}")
    return warnings
