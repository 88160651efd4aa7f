"""Reading files that users name: never blocks, never reads without bound, one clear error.

``open()`` of a FIFO blocks until a writer appears (the exporter hung before it listened, and
a signal handler that returns lets the kernel restart the call), a device or ``/proc/kcore``
never ends, and a sparse file of gigabytes is read whole before any size check. So every file
the exporter reads because a flag or a config file names it (passwd file, web config and its
certificates, scenarios, PyTorch statistics files, container runtime files, ``<procfs>/stat``)
goes through ``read_file``:

1. ``stat`` first, so that a FIFO, socket, device or directory is refused without being
   opened (opening some devices has side effects);
2. ``open`` with ``O_NONBLOCK`` (and ``O_NOFOLLOW`` where links are not to be followed), then
   ``fstat`` the opened file: it must still be a regular file within the size bound (it may
   have been swapped since the ``stat``);
3. read at most the bound plus one byte; a file whose size or mtime changed while it was read
   is read again, a few times, then refused.

Per-process procfs files (``/proc/<pid>/stat``, ``status``, ``cgroup``...) are read on every
collection and are kernel files: ``read_small`` opens them non-blocking and reads once,
bounded, which is all a FIFO or device planted under a fake ``--procfs`` can cost.

Refusals raise ``FileRefused`` (an ``OSError``, so callers' ``except OSError`` keeps working);
failures of the system calls propagate as they are (``FileNotFoundError``...). ``describe``
turns either into the words for a log line or an error message.
"""

from __future__ import annotations

import errno
import os
import stat

__all__ = ["FileRefused", "describe", "read_file", "read_file_stat", "read_small"]

#: Reads of one file before a file that keeps changing is refused.
ATTEMPTS = 3

_NOT_REGULAR = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISLNK, "a symbolic link"),
)


class FileRefused(OSError):
    """The file exists but is not one to read: not a regular file, too large, or changing."""


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


def _check(info: os.stat_result, path: str, max_bytes: int) -> None:
    mode = info.st_mode
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    for test, kind in _NOT_REGULAR:
        if test(mode):
            raise FileRefused(f"is {kind}, not a regular file")
    if not stat.S_ISREG(mode):
        raise FileRefused("is not a regular file")
    if info.st_size > max_bytes:
        raise FileRefused(f"is {_size(info.st_size)}, larger than the {_size(max_bytes)} limit")


def _read_to_end(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while total < limit:
        chunk = os.pread(fd, min(limit - total, 1 << 20), total)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def read_file_stat(path: str, max_bytes: int, *,
                   follow_symlinks: bool = True) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file ``path`` (at most ``max_bytes``) and its ``fstat``.

    ``follow_symlinks=False``: a symbolic link is refused (files in a directory other users
    write to).

    Raises:
        FileRefused: not a regular file, larger than ``max_bytes``, or changing while read.
        OSError: ``stat``, ``open`` or ``read`` failed (missing, permission, a link loop...).
    """
    _check(os.stat(path, follow_symlinks=follow_symlinks), path, max_bytes)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    fd = os.open(path, flags)
    try:
        for _ in range(ATTEMPTS):
            before = os.fstat(fd)
            _check(before, path, max_bytes)
            data = _read_to_end(fd, max_bytes + 1)
            if len(data) > max_bytes:
                raise FileRefused(f"grew past the {_size(max_bytes)} limit while being read")
            after = os.fstat(fd)
            if (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns):
                return data, after
        raise FileRefused(f"changed while being read, {ATTEMPTS} times in a row")
    finally:
        os.close(fd)


def read_file(path: str, max_bytes: int, *, follow_symlinks: bool = True) -> bytes:
    """The bytes of the regular file ``path`` (see ``read_file_stat``)."""
    return read_file_stat(path, max_bytes, follow_symlinks=follow_symlinks)[0]


def read_small(path: str, limit: int = 4096) -> bytes:
    """One non-blocking read of at most ``limit`` bytes of a small kernel file (procfs).

    Raises:
        OSError: as raised by open or read (FileNotFoundError, PermissionError, ...).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def describe(exc: OSError) -> str:
    """What went wrong, for a message that already names the file ("is a FIFO, not a
    regular file", "No such file or directory")."""
    if isinstance(exc, FileRefused) or not exc.strerror:
        return str(exc)
    return exc.strerror
