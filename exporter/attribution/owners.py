"""pid -> owner (uid, user name, process name, start time) and cgroup, from a procfs tree.

This is the one step that reads ``/proc/<pid>``: with ``cgroups=True`` the same lookup also
reads ``<pid>/cgroup`` (the workload identity, ``exporter.catalogue.workloads.identify``),
and both are cached together per (pid, start time).

Everything is read from ``<procfs>/<pid>/...`` with a configurable root, so the exporter works
in the host PID namespace (``/proc``) and with the host's procfs mounted elsewhere (e.g.
``/host/proc``). Names come from a passwd file (``exporter.attribution.passwd``), never from the
container's NSS (so no ``psutil.Process.username()``).

Cost: entries are cached by (pid, start time in clock ticks). The warm path is one read of
``<procfs>/<pid>/stat`` per pid per collection, for owner and cgroup alike (a pid seen on
several GPUs is read once); a reused pid has a different start time and is resolved afresh.
``end_collection`` evicts pids not looked up since the previous collection, and the cache is
capped at ``max_entries``.

Each lookup says *why* it has no owner (``OwnerStatus``), because the enricher must tell two
cases apart:

- ``VANISHED``: the process existed and exited during this collection: a read failed with
  ENOENT/ESRCH after an earlier read of the same pid succeeded (in this collection or a
  previous one). Normal; not counted.
- ``NOT_VISIBLE``: ``<procfs>/<pid>`` was never readable: another PID namespace (no
  ``--pid=host``), ``hidepid=2``, or a process that started and exited between two
  collections. Counted as ``owner_lookup`` so held memory never silently disappears.
- ``DENIED``: the entry exists but cannot be read (``hidepid=1``, permissions) or is garbled.
  Counted as ``owner_lookup``.
- ``PARTIAL``: uid and start time were read but ``comm``/``cmdline`` were not (an owner is
  still returned). Counted as ``owner_lookup``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum

from exporter.attribution.passwd import PASSWD_ERROR_KIND, PasswdFile
from exporter.attribution.pidcache import CollectionScoped
from exporter.catalogue.workloads import CgroupIdentity, identify
from exporter.files import describe, read_file, read_small
from exporter.snapshot import ProcessOwner

#: Kind counted in ``Snapshot.errors`` for processes whose owner could not be read.
OWNER_ERROR_KIND = "owner_lookup"
#: Kind counted when a process's cgroup file cannot be read (its pod stays unknown).
CGROUP_ERROR_KIND = "pod_lookup"

_CMDLINE_LIMIT = 4096  # bytes; a longer command line is cut (it is opt-in and for display)
_STATUS_LIMIT = 16384  # Uid: is on line 9; the limit only guards against odd procfs files
_STARTTIME_INDEX = 19  # field 22 of stat, counted from field 3 (the first after the comm)
#: Most bytes of a cgroup file read (deeply nested hierarchies stay far below).
CGROUP_LIMIT = 65536


class ProcfsError(ValueError):
    """A procfs root cannot be used (no ``<procfs>/stat`` with ``btime``). Message is for users."""


class OwnerStatus(str, Enum):
    """Outcome of one owner lookup (see the module docstring for the rule)."""

    FOUND = "found"
    PARTIAL = "partial"
    VANISHED = "vanished"
    NOT_VISIBLE = "not_visible"
    DENIED = "denied"


@dataclass(frozen=True, slots=True)
class OwnerLookup:
    """The owner of a pid (None unless FOUND or PARTIAL), how the lookup went, and the
    identity its cgroup gives (None: a host process, or cgroups not read)."""

    status: OwnerStatus
    owner: ProcessOwner | None = None
    cgroup: CgroupIdentity | None = None


@dataclass(frozen=True, slots=True)
class _Entry:
    """A cached owner, valid while the pid's start time and the passwd file are unchanged."""

    start_ticks: int
    owner: ProcessOwner
    passwd_generation: int
    cgroup: CgroupIdentity | None


class ProcfsFormatError(ValueError):
    """A ``/proc/<pid>`` file does not have the layout proc(5) describes."""


def parse_stat(data: bytes) -> tuple[str, int]:
    """(comm, starttime in clock ticks) from ``/proc/<pid>/stat``.

    The comm sits in parentheses and may itself contain spaces and parentheses, so the line is
    split at the *last* ``)``.

    Raises:
        ProcfsFormatError: the line does not have the stat(5) layout.
    """
    start, end = data.find(b"("), data.rfind(b")")
    if start < 0 or end < start:
        raise ProcfsFormatError("no (comm)")
    fields = data[end + 1 :].split()
    if len(fields) <= _STARTTIME_INDEX or not fields[_STARTTIME_INDEX].isdigit():
        raise ProcfsFormatError("no starttime")
    comm = data[start + 1 : end].decode("utf-8", errors="replace")
    return comm, int(fields[_STARTTIME_INDEX])


def parse_status(data: bytes) -> tuple[int, str | None]:
    """(real uid, Name: value or None) from ``/proc/<pid>/status``.

    Raises:
        ProcfsFormatError: there is no numeric ``Uid:`` line.
    """
    name: str | None = None
    for line in data.splitlines():
        if line.startswith(b"Name:"):
            name = line[5:].strip().decode("utf-8", errors="replace")
        elif line.startswith(b"Uid:"):
            fields = line[4:].split()
            if not fields or not fields[0].isdigit():
                raise ProcfsFormatError("bad Uid line")
            return int(fields[0]), name
    raise ProcfsFormatError("no Uid line")


def read_boot_time(procfs: str) -> float:
    """``btime`` (Unix seconds of boot) from ``<procfs>/stat``.

    Raises:
        ProcfsError: the file is unreadable or has no ``btime`` line.
    """
    path = f"{procfs.rstrip('/')}/stat"
    try:
        data = read_file(path, 1 << 20)
    except OSError as err:
        raise ProcfsError(f"procfs {procfs}: cannot read {path}: {describe(err)}") from None
    for line in data.splitlines():
        if line.startswith(b"btime"):
            fields = line.split()
            if len(fields) == 2 and fields[1].isdigit():
                return float(int(fields[1]))
    raise ProcfsError(f"procfs {procfs}: {path} has no btime line; is procfs mounted there?")


def read_cgroup(procfs: str, pid: int) -> str:
    """The text of ``<procfs>/<pid>/cgroup`` (at most ``CGROUP_LIMIT`` bytes).

    Raises:
        OSError: the file cannot be read (FileNotFoundError/ProcessLookupError: the process
            is gone or not visible).
    """
    data = read_small(f"{procfs}/{pid}/cgroup", CGROUP_LIMIT)
    return data.decode("utf-8", errors="replace")


def check_procfs(procfs: str) -> None:
    """Validate a procfs root at start-up (for the CLI).

    Raises:
        ProcfsError: ``<procfs>/stat`` is missing, unreadable or has no ``btime``.
    """
    read_boot_time(procfs)


class OwnerResolver(CollectionScoped[_Entry, OwnerLookup]):
    """Resolves pids to ``ProcessOwner`` from ``<procfs>`` and a passwd file. Thread-safe.

    Use ``with resolver.collection(): ...`` (or ``begin_collection``/``end_collection``) around
    one snapshot's lookups: inside a collection each pid is read at most once, and at the end
    cache entries of pids not looked up are evicted. Errors are collected until
    ``take_errors``.
    """

    def __init__(
        self,
        *,
        procfs: str = "/proc",
        passwd_file: str = "/etc/passwd",
        include_cmdline: bool = False,
        cgroups: bool = False,
        clock: Callable[[], float] = time.monotonic,
        passwd_check_interval: float = 1.0,
        max_entries: int = 16384,
    ) -> None:
        """``cgroups``: also read each process's cgroup (for workload labels)."""
        super().__init__(max_entries)
        self._cgroups = cgroups
        self._cgroup_errors = 0
        self._procfs = procfs.rstrip("/")
        self._passwd = PasswdFile(passwd_file, check_interval=passwd_check_interval, clock=clock)
        self._include_cmdline = include_cmdline
        self._ticks = float(os.sysconf("SC_CLK_TCK"))
        self._boot_time: float | None = None
        self._errors = 0

    # --- collections ------------------------------------------------------------------------
    def begin_collection(self) -> None:
        """Start one snapshot's lookups (re-checks the passwd file, paced)."""
        with self._lock:
            super().begin_collection()
            self._passwd.refresh()

    def take_errors(self) -> dict[str, int]:
        """Error counts by kind since the last call (only non-zero kinds), and reset them."""
        with self._lock:
            errors: dict[str, int] = {}
            if self._errors:
                errors[OWNER_ERROR_KIND] = self._errors
            if self._cgroup_errors:
                errors[CGROUP_ERROR_KIND] = self._cgroup_errors
            passwd_errors = self._passwd.take_errors()
            if passwd_errors:
                errors[PASSWD_ERROR_KIND] = passwd_errors
            self._errors = self._cgroup_errors = 0
            return errors

    # --- lookups ------------------------------------------------------------------------------
    def user_name(self, uid: int) -> str:
        """The passwd file's name of ``uid`` (its number without an entry). Never raises."""
        return self._passwd.name(uid)

    def resolve(self, pid: int) -> ProcessOwner | None:
        """The owner of ``pid``, or None if it vanished or cannot be read. Never raises."""
        return self.lookup(pid).owner

    def lookup(self, pid: int) -> OwnerLookup:
        """The owner of ``pid`` and why it is missing if it is. Never raises."""
        return self._memoised(pid, lambda: self._counted_lookup(pid))

    def _counted_lookup(self, pid: int) -> OwnerLookup:
        result = self._lookup(pid)
        if result.status not in (OwnerStatus.FOUND, OwnerStatus.VANISHED):
            self._errors += 1
        return result

    def _lookup(self, pid: int) -> OwnerLookup:
        if pid <= 0:
            return OwnerLookup(OwnerStatus.DENIED)
        self._pids.touch(pid)
        base = f"{self._procfs}/{pid}"
        cached = self._pids.entries.get(pid)
        try:
            stat_comm, start_ticks = parse_stat(read_small(f"{base}/stat"))
        except ProcessLookupError:  # ESRCH: the entry was there when opened
            return self._vanished(pid)
        except FileNotFoundError:
            return self._vanished(pid) if cached else OwnerLookup(OwnerStatus.NOT_VISIBLE)
        except (OSError, ProcfsFormatError):
            return OwnerLookup(OwnerStatus.DENIED)
        if cached is not None and cached.start_ticks == start_ticks:
            return OwnerLookup(OwnerStatus.FOUND, self._fresh_name(pid, cached), cached.cgroup)
        # From here the entry is known to have existed: ENOENT/ESRCH means it exited.
        try:
            uid, status_name = parse_status(read_small(f"{base}/status", _STATUS_LIMIT))
        except (FileNotFoundError, ProcessLookupError):
            return self._vanished(pid)
        except (OSError, ProcfsFormatError):
            return OwnerLookup(OwnerStatus.DENIED)
        partial = False
        try:
            name = read_small(f"{base}/comm").rstrip(b"\n").decode("utf-8", errors="replace")
        except (FileNotFoundError, ProcessLookupError):
            return self._vanished(pid)
        except OSError:
            name, partial = status_name or stat_comm, True
        cmdline: str | None = None
        if self._include_cmdline:
            try:
                cmdline = _format_cmdline(read_small(f"{base}/cmdline", _CMDLINE_LIMIT))
            except (FileNotFoundError, ProcessLookupError):
                return self._vanished(pid)
            except OSError:
                partial = True
        cgroup: CgroupIdentity | None = None
        cgroup_failed = False  # the owner is fine; the entry is not cached so it is retried
        if self._cgroups:
            try:
                cgroup = identify(read_cgroup(self._procfs, pid))
            except (FileNotFoundError, ProcessLookupError):
                return self._vanished(pid)
            except OSError:
                self._cgroup_errors += 1
                cgroup_failed = True
        boot_time = self._get_boot_time()
        if boot_time is None:
            return OwnerLookup(OwnerStatus.DENIED)
        owner = ProcessOwner(
            uid=uid,
            user=self._passwd.name(uid),
            name=name,
            start_time_seconds=boot_time + start_ticks / self._ticks,
            cmdline=cmdline,
        )
        if partial or cgroup_failed:  # not cached: retried (and counted) every collection
            self._pids.entries.pop(pid, None)
            status = OwnerStatus.PARTIAL if partial else OwnerStatus.FOUND
            return OwnerLookup(status, owner, cgroup)
        self._pids.put(pid, _Entry(start_ticks, owner, self._passwd.generation, cgroup))
        return OwnerLookup(OwnerStatus.FOUND, owner, cgroup)

    def _vanished(self, pid: int) -> OwnerLookup:
        self._pids.entries.pop(pid, None)
        return OwnerLookup(OwnerStatus.VANISHED)

    def _fresh_name(self, pid: int, entry: _Entry) -> ProcessOwner:
        """The cached owner, renamed if the passwd file changed since it was cached."""
        if entry.passwd_generation == self._passwd.generation:
            return entry.owner
        owner = replace(entry.owner, user=self._passwd.name(entry.owner.uid))
        self._pids.entries[pid] = replace(entry, owner=owner,
                                          passwd_generation=self._passwd.generation)
        return owner

    def _get_boot_time(self) -> float | None:
        # Read once: btime drifts by NTP steps and start times must stay stable per process.
        if self._boot_time is None:
            try:
                self._boot_time = read_boot_time(self._procfs or "/")
            except ProcfsError:
                # Boot time is kernel-wide, so the exporter's own /proc/stat gives the same value.
                # psutil only here: a scrape does not need its ~0.6 MB otherwise.
                import psutil  # noqa: PLC0415

                try:
                    self._boot_time = float(psutil.boot_time())
                except (OSError, RuntimeError):
                    return None
        return self._boot_time


def _format_cmdline(data: bytes) -> str | None:
    """NUL-separated argv -> one space-separated string; None when empty (kernel thread)."""
    args = data.rstrip(b"\0").split(b"\0")
    text = " ".join(arg.decode("utf-8", errors="replace") for arg in args).strip()
    return text or None
