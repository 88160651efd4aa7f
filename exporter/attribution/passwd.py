"""uid -> user name from a passwd file whose path is configurable.

The exporter resolves names against a passwd file it is *given* (typically the host's
``/etc/passwd`` mounted read-only into the container), never against the container's own NSS:
``pwd.getpwuid`` inside an exporter image knows none of the host's users.

At runtime the file is re-read only when its identity (inode, size, mtime) changes, and the
check itself is a single ``os.stat`` at most once per ``check_interval`` seconds. A missing or
unreadable file at runtime is not fatal: names fall back to the numeric uid and the failure is
counted (``PasswdFile.take_errors``). Start-up validation is ``check_passwd_file``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping

#: Kind counted in ``Snapshot.errors`` when the passwd file cannot be read at runtime.
PASSWD_ERROR_KIND = "passwd_file"

#: Larger files are refused: a passwd file is kilobytes, megabytes for very large LDAP dumps.
MAX_PASSWD_BYTES = 64 * 1024 * 1024


class PasswdFileError(ValueError):
    """A passwd file cannot be used (missing, unreadable, not passwd). The message is for users."""


def parse_passwd(text: str) -> dict[int, str]:
    """Parse passwd(5) text into uid -> name, skipping lines that are not valid entries.

    Comments, blank lines, NIS ``+``/``-`` lines, lines with fewer than three fields, empty
    names and non-numeric or negative uids are skipped. When a uid appears twice the first
    entry wins, like ``getpwuid``. Never raises.
    """
    users: dict[int, str] = {}
    for line in text.splitlines():
        if not line or line[0] in "#+-":
            continue
        fields = line.split(":")
        if len(fields) < 3 or not fields[0]:
            continue
        uid_text = fields[2].strip()
        if not (uid_text.isascii() and uid_text.isdigit()):  # rejects "-1", "", "1e3", "²"
            continue
        users.setdefault(int(uid_text), fields[0])
    return users


def _read_passwd(path: str) -> dict[int, str]:
    """Read and parse ``path``.

    Raises:
        OSError: the file cannot be opened or read.
        PasswdFileError: the file is larger than ``MAX_PASSWD_BYTES``.
    """
    with open(path, "rb") as handle:
        data = handle.read(MAX_PASSWD_BYTES + 1)
    if len(data) > MAX_PASSWD_BYTES:
        raise PasswdFileError(f"passwd file {path}: larger than {MAX_PASSWD_BYTES} bytes")
    return parse_passwd(data.decode("utf-8", errors="replace"))


def check_passwd_file(path: str) -> None:
    """Validate a passwd file at start-up (for the CLI).

    Raises:
        PasswdFileError: the file is missing, is a directory, cannot be read, is too large, or
            holds no valid ``name:x:uid:...`` entry. The message names the path and the fix.
    """
    hint = "mount the host's /etc/passwd read-only (e.g. at /host/etc/passwd) and pass its path"
    try:
        users = _read_passwd(path)
    except FileNotFoundError:
        raise PasswdFileError(f"passwd file {path}: not found; {hint}") from None
    except IsADirectoryError:
        raise PasswdFileError(f"passwd file {path}: is a directory, expected a file") from None
    except PermissionError:
        raise PasswdFileError(f"passwd file {path}: permission denied; {hint}") from None
    except OSError as err:
        raise PasswdFileError(f"passwd file {path}: cannot be read: {err.strerror}") from None
    if not users:
        raise PasswdFileError(
            f"passwd file {path}: no valid 'name:password:uid:...' line; is this a passwd file?"
        )


class PasswdFile:
    """A passwd file, re-read only when it changes. Thread-safe.

    ``clock`` (monotonic seconds) paces the change check: at most one ``os.stat`` per
    ``check_interval`` seconds, so a collection costs one stat at most.
    """

    def __init__(
        self,
        path: str,
        *,
        check_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._check_interval = check_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._users: Mapping[int, str] = {}
        self._identity: tuple[int, int, int, int] | None = None
        self._last_check: float | None = None
        self._failing = False
        self._errors = 0
        self.generation = 0  # bumped whenever the uid -> name table changes

    def name(self, uid: int) -> str:
        """The user name of ``uid``, or ``str(uid)`` when the file has no entry. Never raises."""
        self.refresh()
        return self._users.get(uid, str(uid))

    def refresh(self, *, force: bool = False) -> None:
        """Re-read the file if it changed; paced by ``check_interval`` unless ``force``.

        A file that cannot be stat'ed or read empties the table (numeric names) and counts one
        error per check while it keeps failing. Never raises.
        """
        with self._lock:
            now = self._clock()
            if (
                not force
                and self._last_check is not None
                and now - self._last_check < self._check_interval
            ):
                return
            self._last_check = now
            try:
                info = os.stat(self.path)
                identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
                if identity == self._identity and not self._failing:
                    return
                users = _read_passwd(self.path)
            except (OSError, PasswdFileError):
                self._errors += 1
                self._failing = True
                if self._users:
                    self._users = {}
                    self.generation += 1
                self._identity = None
                return
            self._failing = False
            self._identity = identity
            if users != self._users:
                self._users = users
                self.generation += 1

    def take_errors(self) -> int:
        """How many failed checks since the last call (and reset the count)."""
        with self._lock:
            errors, self._errors = self._errors, 0
            return errors
