"""Reads the allocator statistics that ``gpu_exporter_torch`` publishes, and joins them by pid.

A publishing process writes ``<dir>/<pid>-<start ticks>-<pid namespace inode>.json`` with its
own view of its pid (inside a container: the container's pid). NVML reports host pids, so a
host pid is matched through ``<procfs>/<pid>/status`` (``NSpid:``'s last entry is the pid
inside the process's own namespace) and ``<procfs>/<pid>/stat`` (start time in clock ticks).

Trust rule: a file counts for a process only if the file's owner (``fstat`` of the opened file,
not a claim inside it) is the process's real uid, its pid and start time match the live
process, and its pid namespace matches where the exporter can read it. So no user can publish
numbers for another user's process, and a reused pid never inherits an old file.

Bounds, so hostile or broken input never breaks a scrape: at most ``max_files`` entries are
looked at per scan, files over ``max_file_bytes`` are rejected unread, symlinks and non-regular
files are skipped without opening (O_NOFOLLOW|O_NONBLOCK), and a file's content must pass
the format's checks (``exporter.attribution.torchfile``). Each rejected file version is
counted once in ``take_errors()`` under ``torch_stats_file``.

Cost: one ``scandir`` plus one ``lstat`` per file per collection; a file is read and parsed
only when its (inode, size, mtime) changed. Files older than ``max_age`` seconds (or three of
the publisher's own intervals, if longer) are ignored (their process stopped publishing);
files not rewritten for ``remove_after`` seconds, and files of exited processes in the
exporter's PID namespace, are deleted when the exporter may.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from exporter.attribution.enrich import SKIPPED_SOURCES, merge_errors
from exporter.attribution.owners import ProcfsFormatError, parse_stat
from exporter.attribution.pidcache import CollectionScoped
from exporter.attribution.torchfile import TorchFile, TorchFileError, parse_document
from exporter.catalogue.metrics.allocator import PUBLISHED_FIELDS
from exporter.files import read_file_stat, read_small
from exporter.snapshot import GpuProcess, GpuReading, Snapshot

log = logging.getLogger(__name__)

#: Kind counted in ``Snapshot.errors`` for publisher files that were rejected.
TORCH_FILE_ERROR_KIND = "torch_stats_file"
_NAME = re.compile(r"^([1-9][0-9]{0,9})-([0-9]{1,20})-([0-9]{1,20})\.json$")
_NS_LINK = re.compile(r"^pid:\[([0-9]+)\]$")
_STATUS_LIMIT = 16384


@dataclass(frozen=True, slots=True)
class _Version:
    """What identifies one version of a file between scans, and what it held."""

    inode: int
    size: int
    mtime_ns: int
    file: TorchFile | None  # None: rejected (already counted)


@dataclass(frozen=True, slots=True)
class _Process:
    """What the exporter needs of a host process to match it against files."""

    start_ticks: int
    own_pid: int  # NSpid's last entry
    uid: int
    pid_namespace: int | None  # None where the exporter may not read /proc/<pid>/ns/pid


class TorchStatsReader(CollectionScoped[_Process, TorchFile | None]):
    """Finds the publisher file of host pids in ``directory``. Thread-safe; never raises.

    Per collection: ``with reader.collection(): reader.lookup(pid) ...``; the directory is
    scanned when a collection begins.
    """

    def __init__(
        self,
        directory: str,
        *,
        procfs: str = "/proc",
        max_files: int = 4096,
        max_file_bytes: int = 65536,
        max_age: float = 60.0,
        remove_after: float = 600.0,
        cleanup_interval: float = 30.0,
        clock: Callable[[], float] = time.time,
        max_entries: int = 16384,
    ) -> None:
        super().__init__(max_entries)
        self.directory = directory
        self._procfs = procfs.rstrip("/")
        self._max_files = max_files
        self._max_file_bytes = max_file_bytes
        self._max_age = max_age
        self._remove_after = remove_after
        self._cleanup_interval = cleanup_interval
        self._clock = clock
        self._versions: dict[str, _Version] = {}
        self._index: dict[tuple[int, int], list[TorchFile]] = {}
        self._errors = 0
        self._last_cleanup = float("-inf")
        self._procfs_namespace: int | None = None
        self.scan_error: str | None = None  # why the directory could not be listed, if so

    # --- collections ------------------------------------------------------------------------
    def begin_collection(self) -> None:
        """Start one snapshot's lookups: rescan the directory (changed files only are read)."""
        with self._lock:
            super().begin_collection()
            self.scan()

    def take_errors(self) -> dict[str, int]:
        """Rejected-file counts since the last call (only if non-zero), and reset them."""
        with self._lock:
            errors = {TORCH_FILE_ERROR_KIND: self._errors} if self._errors else {}
            self._errors = 0
            return errors

    # --- the directory ------------------------------------------------------------------------
    def scan(self) -> None:
        """Refresh the index from the directory. Never raises."""
        with self._lock:
            now = self._clock()
            try:
                entries = self._list()
            except OSError as err:
                self.scan_error = f"{self.directory}: {err.strerror or err}"
                self._versions, self._index = {}, {}
                return
            self.scan_error = None
            versions: dict[str, _Version] = {}
            index: dict[tuple[int, int], list[TorchFile]] = {}
            for name, info in entries:
                version = self._version(name, info)
                versions[name] = version
                file = version.file
                if file is not None and now - file.mtime <= max(self._max_age,
                                                                3 * file.interval):
                    index.setdefault((file.pid, file.start_ticks), []).append(file)
            self._versions, self._index = versions, index
            if now - self._last_cleanup >= self._cleanup_interval:
                self._last_cleanup = now
                self._cleanup(now)

    def _list(self) -> list[tuple[str, os.stat_result]]:
        found: list[tuple[str, os.stat_result]] = []
        with os.scandir(self.directory) as entries:
            for looked, entry in enumerate(entries):
                if looked >= self._max_files:
                    break  # counted over every entry: a directory of junk names is bounded too
                if _NAME.match(entry.name) is None:
                    continue  # temporary files (".<name>.tmp") and anything else
                try:
                    found.append((entry.name, entry.stat(follow_symlinks=False)))
                except OSError:
                    continue  # replaced or removed since the listing
        return found

    def _version(self, name: str, info: os.stat_result) -> _Version:
        known = self._versions.get(name)
        if (
            known is not None
            and known.inode == info.st_ino
            and known.size == info.st_size
            and known.mtime_ns == info.st_mtime_ns
        ):
            return known
        file: TorchFile | None = None
        try:
            file = self._read(name, info)
        except (OSError, TorchFileError):
            self._errors += 1
        return _Version(info.st_ino, info.st_size, info.st_mtime_ns, file)

    def _read(self, name: str, info: os.stat_result) -> TorchFile:
        """Open without following links or blocking, check it is a small regular file, parse.

        Raises:
            OSError, TorchFileError: not a regular file, too large, unreadable or malformed.
        """
        if not stat.S_ISREG(info.st_mode) or info.st_size > self._max_file_bytes:
            raise TorchFileError("not a regular file of acceptable size")
        path = os.path.join(self.directory, name)
        data, opened = read_file_stat(path, self._max_file_bytes, follow_symlinks=False)
        match = _NAME.match(name)
        assert match is not None  # _list keeps matching names only
        pid, start_ticks, pid_namespace, interval, devices = parse_document(data)
        if (pid, start_ticks, pid_namespace) != tuple(int(g) for g in match.groups()):
            raise TorchFileError("contents do not match the file name")
        return TorchFile(
            path=path,
            pid=pid,
            start_ticks=start_ticks,
            pid_namespace=pid_namespace,
            owner_uid=opened.st_uid,
            mtime=opened.st_mtime,
            devices=devices,
            interval=interval,
        )

    def _cleanup(self, now: float) -> None:
        """Delete files not rewritten for ``remove_after`` s and, in the exporter's own PID
        namespace, files whose process exited. Failures (e.g. EPERM) are ignored."""
        own_namespace = self._own_namespace()
        for name, version in list(self._versions.items()):
            path = os.path.join(self.directory, name)
            match = _NAME.match(name)
            assert match is not None
            pid, start_ticks, namespace = (int(g) for g in match.groups())
            age = now - version.mtime_ns / 1e9
            exited = own_namespace is not None and namespace == own_namespace and \
                not self._alive(pid, start_ticks)
            if age > self._remove_after or exited:
                try:
                    os.unlink(path)
                except OSError:
                    continue
                self._versions.pop(name, None)
                _drop(self._index, version.file)

    def _own_namespace(self) -> int | None:
        """PID namespace inode of the procfs the exporter reads (None if unreadable)."""
        if self._procfs_namespace is None:
            self._procfs_namespace = _namespace_of(f"{self._procfs}/1/ns/pid") or \
                _namespace_of(f"{self._procfs}/self/ns/pid")
        return self._procfs_namespace

    def _alive(self, pid: int, start_ticks: int) -> bool:
        try:
            _, ticks = parse_stat(read_small(f"{self._procfs}/{pid}/stat"))
        except (FileNotFoundError, ProcessLookupError):
            return False
        except (OSError, ProcfsFormatError):
            return True  # cannot tell: keep it
        return ticks == start_ticks

    # --- lookups ------------------------------------------------------------------------------
    @property
    def has_files(self) -> bool:
        """Whether the last scan found any fresh, valid file (lookups are free otherwise)."""
        return bool(self._index)

    def lookup(self, pid: int) -> TorchFile | None:
        """The fresh, trusted file of host ``pid``, or None. Never raises."""
        if not self._index:
            return None
        return self._memoised(pid, lambda: self._lookup(pid))

    def _lookup(self, pid: int) -> TorchFile | None:
        self._pids.touch(pid)
        process = self._process(pid)
        if process is None:
            return None
        candidates = [
            file
            for file in self._index.get((process.own_pid, process.start_ticks), ())
            if file.owner_uid == process.uid
        ]
        if process.pid_namespace is not None:
            candidates = [
                f for f in candidates if f.pid_namespace in (process.pid_namespace, 0)
            ]
        # Ambiguous (same pid and start tick in two namespaces the exporter cannot tell
        # apart): better no figures than someone else's.
        return candidates[0] if len(candidates) == 1 else None

    def _process(self, pid: int) -> _Process | None:
        base = f"{self._procfs}/{pid}"
        try:
            _, start_ticks = parse_stat(read_small(f"{base}/stat"))
        except (OSError, ProcfsFormatError):
            self._pids.entries.pop(pid, None)
            return None
        cached = self._pids.entries.get(pid)
        if cached is not None and cached.start_ticks == start_ticks:
            return cached
        try:
            uid, own_pid = parse_status_ids(read_small(f"{base}/status", _STATUS_LIMIT))
        except (OSError, ProcfsFormatError):
            return None
        process = _Process(start_ticks, own_pid or pid, uid, _namespace_of(f"{base}/ns/pid"))
        self._pids.put(pid, process)
        return process


def parse_status_ids(data: bytes) -> tuple[int, int | None]:
    """(real uid, pid in the innermost PID namespace or None) from ``/proc/<pid>/status``.

    Raises:
        ProcfsFormatError: there is no numeric ``Uid:`` line.
    """
    uid: int | None = None
    own_pid: int | None = None
    for line in data.splitlines():
        if line.startswith(b"Uid:"):
            fields = line[4:].split()
            if not fields or not fields[0].isdigit():
                raise ProcfsFormatError("bad Uid line")
            uid = int(fields[0])
        elif line.startswith(b"NSpid:"):
            fields = line[6:].split()
            if fields and fields[-1].isdigit():
                own_pid = int(fields[-1])
    if uid is None:
        raise ProcfsFormatError("no Uid line")
    return uid, own_pid


def _namespace_of(link: str) -> int | None:
    """Inode from a ``ns/pid`` link (``pid:[4026531836]``); None if unreadable."""
    try:
        match = _NS_LINK.match(os.readlink(link))
    except OSError:
        return None
    return int(match.group(1)) if match else None


def _drop(index: dict[tuple[int, int], list[TorchFile]], file: TorchFile | None) -> None:
    if file is None:
        return
    files = index.get((file.pid, file.start_ticks), [])
    if file in files:
        files.remove(file)
    if not files:
        index.pop((file.pid, file.start_ticks), None)


class TorchEnricher:
    """Adds the published allocator figures to the processes of a snapshot (by pid and GPU
    uuid), as ``GpuProcess.values`` under the ``exporter.catalogue.metrics.allocator`` row names.
    Processes without a trusted, fresh file are returned as they are. Never raises."""

    def __init__(self, reader: TorchStatsReader, *,
                 skip_sources: frozenset[str] = SKIPPED_SOURCES) -> None:
        self.reader = reader
        self.skip_sources = skip_sources
        self._reported_scan_error: str | None = None

    def enrich(self, snapshot: Snapshot) -> Snapshot:
        """Return a new snapshot with allocator figures where a process published them."""
        if snapshot.source in self.skip_sources:
            return snapshot
        with self.reader.collection():
            self._report_scan_error()
            gpus = snapshot.gpus
            if self.reader.has_files:
                gpus = tuple(self._gpu(gpu) for gpu in snapshot.gpus)
        errors = self.reader.take_errors()
        if not errors and gpus is snapshot.gpus:
            return snapshot
        return replace(snapshot, gpus=gpus, errors=merge_errors(snapshot.errors, errors))

    def _report_scan_error(self) -> None:
        error = self.reader.scan_error
        if error != self._reported_scan_error:
            self._reported_scan_error = error
            if error is not None:
                log.warning("cannot read the torch statistics directory %s; no process gets "
                            "allocator series until it can", error)

    def _gpu(self, gpu: GpuReading) -> GpuReading:
        if not gpu.processes:
            return gpu
        processes = tuple(self._process(process, gpu.identity.uuid) for process in gpu.processes)
        return replace(gpu, processes=processes)

    def _process(self, process: GpuProcess, uuid: str) -> GpuProcess:
        file = self.reader.lookup(process.pid)
        memory = file.device(uuid) if file is not None else None
        if memory is None:
            return process
        values = dict(process.values)
        for row_name, field_name in PUBLISHED_FIELDS.items():
            value = getattr(memory, field_name)
            if value is not None:
                values[row_name] = float(value)
        return replace(process, values=values)
