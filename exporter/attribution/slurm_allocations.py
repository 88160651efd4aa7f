"""Slurm's GPU allocations from the prolog's allocation files (``--slurm.allocation-dir``).

A Slurm prolog writes ``<dir>/<index>``, ``<dir>/GPU-<uuid>`` or ``<dir>/MIG-<uuid>`` holding
"<job id> <uid>" for each GPU it gives a job, and the epilog removes them (the convention of
Princeton's Jobstats; names and contents are parsed in ``exporter.catalogue.gpustat``;
``slurm/prolog.sh`` in this repository writes them). ``SlurmAllocations`` reads them at every
collection and adds one ``AllocationRow`` per device held (``gpu_allocation_info`` with
``slurm_job``, ``user`` and ``uid``), joined with the GPUs and MIG devices of the snapshot:
Slurm jobs holding a GPU with nothing running on it become visible (``GpuAllocatedIdle``).

Cost: the directory is listed again only when its mtime or inode changes (a file created,
removed or renamed); each allocation file is ``lstat``-ed every collection and read again
only when its inode, size, mtime or ctime changed (a prolog overwriting a stale file in
place). ``bench/bench_slurm_allocations.py`` measures it.

Files are distrusted as every file the exporter reads is (``exporter.files``): a symbolic
link, FIFO, device, a file larger than ``MAX_FILE_BYTES``, one owned by another user than root
(or the exporter's own uid) or whose content is not one "<job id> [<uid>]" line is refused,
logged once and counted as ``gpu_exporter_errors_total{kind="slurm_allocation"}`` once per
change of the file. Other names in the directory are ignored. A missing directory means no
allocations (no GPU job ran since boot), not an error; one that cannot be listed is counted
once per change of its state. One device named by two files (index and UUID) is the UUID
file's, as Jobstats' exporter decides.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from exporter.allocations import EXCLUSIVE
from exporter.attribution.enrich import merge_errors
from exporter.catalogue.gpustat import (
    MAX_ENTRIES,
    MAX_FILE_BYTES,
    RESOURCE,
    DeviceName,
    JobHolder,
    parse_content,
    parse_name,
)
from exporter.files import describe, read_file
from exporter.health import MigDevice
from exporter.snapshot import AllocationRow, GpuReading, Snapshot

__all__ = ["ERROR_KIND", "AllocationFile", "AllocationFiles", "SlurmAllocations",
           "join_slurm_allocations", "reading"]

log = logging.getLogger(__name__)

#: Kind counted in ``Snapshot.errors`` for a refused file or an unreadable directory.
ERROR_KIND = "slurm_allocation"
#: File owners trusted besides the exporter's own uid: root (the prolog runs as root).
_TRUSTED_OWNERS = frozenset({0})


@dataclass(frozen=True, slots=True)
class AllocationFile:
    """One allocation file: what its name names and who holds that device."""

    name: str
    device: DeviceName
    holder: JobHolder


#: (inode, size, mtime, ctime) of a file as last read.
_Identity = tuple[int, int, int, int]


class AllocationFiles:
    """The allocation files of one directory, re-read only where something changed.

    ``read()`` is for one thread at a time (the collector's). Never raises.
    """

    def __init__(self, directory: str, *, max_entries: int = MAX_ENTRIES) -> None:
        self.directory = directory
        self.max_entries = max_entries
        self._listed: tuple[int, int] | None = None  # (inode, mtime) of the listing's directory
        self._names: tuple[tuple[str, DeviceName], ...] = ()
        self._files: dict[str, tuple[_Identity, AllocationFile | None]] = {}
        self._state = ""  # why the directory cannot be read ("" when it can)
        self._errors = 0

    def take_errors(self) -> int:
        """Refused files and failed listings since the last call (and reset the count)."""
        errors, self._errors = self._errors, 0
        return errors

    def read(self) -> tuple[AllocationFile, ...]:
        """Every allocation file now in the directory that could be trusted."""
        if not self._list():
            return ()
        found: list[AllocationFile] = []
        files: dict[str, tuple[_Identity, AllocationFile | None]] = {}
        for name, device in self._names:
            entry = self._file(name, device)
            if entry is not None:
                files[name] = entry
                if entry[1] is not None:
                    found.append(entry[1])
        self._files = files
        return tuple(found)

    def _set_state(self, state: str) -> None:
        if state == self._state:
            return
        if state:
            self._errors += 1
            log.warning("Slurm allocation directory %s: %s; no Slurm allocations until it can "
                        "be read", self.directory, state)
        elif self._state:
            log.info("Slurm allocation directory %s is readable again", self.directory)
        self._state = state

    def _list(self) -> bool:
        """Refresh the names when the directory changed; False when it cannot be read."""
        try:
            info = os.stat(self.directory)
        except FileNotFoundError:  # no job has written one since boot: nothing allocated
            self._set_state("")
            self._listed, self._names = None, ()
            return False
        except OSError as err:
            self._set_state(describe(err))
            return False
        if not stat.S_ISDIR(info.st_mode):
            self._set_state("not a directory")
            return False
        identity = (info.st_ino, info.st_mtime_ns)
        if identity == self._listed and not self._state:
            return True
        names: list[tuple[str, DeviceName]] = []
        try:
            with os.scandir(self.directory) as entries:
                for seen, entry in enumerate(entries):
                    if seen >= self.max_entries:
                        self._errors += 1
                        log.warning("Slurm allocation directory %s holds more than %d entries; "
                                    "the rest are ignored", self.directory, self.max_entries)
                        break
                    device = parse_name(entry.name)
                    if device is not None:
                        names.append((entry.name, device))
        except OSError as err:
            self._set_state(describe(err))
            return False
        self._set_state("")
        self._listed, self._names = identity, tuple(sorted(names))
        return True

    def _file(self, name: str, device: DeviceName
              ) -> tuple[_Identity, AllocationFile | None] | None:
        """(identity, the parsed file or None when refused) of one file; None: it is gone."""
        path = os.path.join(self.directory, name)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as err:
            return self._refused(name, (0, 0, 0, 0), describe(err))
        identity = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        cached = self._files.get(name)
        if cached is not None and cached[0] == identity:
            return cached
        if stat.S_ISREG(info.st_mode) and info.st_uid not in _TRUSTED_OWNERS | {os.geteuid()}:
            return self._refused(name, identity, f"owned by uid {info.st_uid}, not root")
        try:
            data = read_file(path, MAX_FILE_BYTES, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as err:
            return self._refused(name, identity, describe(err))
        holder = parse_content(data)
        if holder is None:
            return self._refused(name, identity, "is not one '<job id> <uid>' line")
        return identity, AllocationFile(name, device, holder)

    def _refused(self, name: str, identity: _Identity, why: str
                 ) -> tuple[_Identity, AllocationFile | None]:
        self._errors += 1
        log.warning("Slurm allocation file %s refused: %s",
                    os.path.join(self.directory, name), why)
        return identity, None


def _index(gpus: Iterable[GpuReading]
           ) -> tuple[dict[str, GpuReading], dict[int, GpuReading],
                      dict[str, tuple[GpuReading, MigDevice]]]:
    by_uuid: dict[str, GpuReading] = {}
    by_index: dict[int, GpuReading] = {}
    migs: dict[str, tuple[GpuReading, MigDevice]] = {}
    for reading in gpus:
        by_uuid[reading.identity.uuid] = reading
        by_index[reading.identity.index] = reading
        migs.update((mig.uuid, (reading, mig)) for mig in reading.mig or ())
    return by_uuid, by_index, migs


def _device(file: AllocationFile, by_uuid: Mapping[str, GpuReading],
            by_index: Mapping[int, GpuReading],
            migs: Mapping[str, tuple[GpuReading, MigDevice]]) -> tuple[str, str, str, str]:
    """(gpu, uuid, device_id, gpu_instance) of the device a file names ("" where unknown)."""
    device = file.device
    parent: GpuReading | None = None
    mig: MigDevice | None = None
    if device.uuid is not None:
        parent = by_uuid.get(device.uuid)
        if parent is None and device.uuid in migs:
            parent, mig = migs[device.uuid]
    elif device.index is not None:
        parent = by_index.get(device.index)
        if parent is not None and device.gpu_instance is not None:
            mig = next((m for m in parent.mig or () if m.gpu_instance == device.gpu_instance),
                       None)
            if mig is None:  # a GPU instance the source did not read
                return "", "", file.name, str(device.gpu_instance)
    if parent is None:
        return "", "", file.name, ""
    identity = parent.identity
    if mig is not None:
        return str(identity.index), identity.uuid, mig.uuid, str(mig.gpu_instance)
    return str(identity.index), identity.uuid, identity.uuid, ""


def join_slurm_allocations(files: Iterable[AllocationFile], gpus: Iterable[GpuReading],
                           user_name: Callable[[int], str] = str) -> tuple[AllocationRow, ...]:
    """One row per device held, joined with the GPUs (and MIG devices) of a snapshot; a
    device named by a UUID file and an index file is the UUID file's."""
    by_uuid, by_index, migs = _index(gpus)
    chosen: dict[str, tuple[bool, AllocationRow]] = {}
    for file in files:
        gpu, uuid, device_id, instance = _device(file, by_uuid, by_index, migs)
        holder = file.holder
        row = AllocationRow(
            gpu=gpu, uuid=uuid, device_id=device_id, gpu_instance=instance, resource=RESOURCE,
            namespace="", pod="", container="", sharing=EXCLUSIVE, slurm_job=holder.job_id,
            user=user_name(int(holder.uid)) if holder.uid else "", uid=holder.uid,
        )
        by_name = file.device.uuid is not None
        previous = chosen.get(device_id)
        if previous is None or (by_name and not previous[0]):
            chosen[device_id] = (by_name, row)
    return tuple(sorted((row for _, row in chosen.values()), key=_order))


def _order(row: AllocationRow) -> tuple[bool, int, int, str]:
    """GPUs by index and GPU instance, then devices of no GPU here by name."""
    if not row.gpu:
        return True, 0, 0, row.device_id
    return False, int(row.gpu), int(row.gpu_instance or -1), row.device_id


class SlurmAllocations:
    """An enricher adding Slurm's allocations to ``Snapshot.allocations`` (after the kubelet's).
    ``user_name`` turns a uid into a name (the owner resolver's passwd file)."""

    def __init__(self, files: AllocationFiles, user_name: Callable[[int], str] = str,
                 skip_sources: frozenset[str] = frozenset({"simulated"})) -> None:
        self.files = files
        self.user_name = user_name
        self.skip_sources = skip_sources

    def enrich(self, snapshot: Snapshot) -> Snapshot:
        """Return ``snapshot`` with the Slurm allocations added. Never raises."""
        if snapshot.source in self.skip_sources:
            return snapshot
        rows = join_slurm_allocations(self.files.read(), snapshot.gpus, self.user_name)
        errors = self.files.take_errors()
        if not rows and not errors:
            return snapshot
        return replace(snapshot, allocations=(*snapshot.allocations, *rows),
                       errors=merge_errors(snapshot.errors, {ERROR_KIND: errors} if errors
                                           else {}))


def reading(directory: str, user_name: Callable[[int], str] = str) -> SlurmAllocations:
    """The enricher reading ``directory`` (``--slurm.allocation-dir``)."""
    return SlurmAllocations(AllocationFiles(directory), user_name)
