"""uid -> user name from a passwd file whose path is configurable.

The exporter resolves names against a passwd file it is *given* (typically the host's
``/etc/passwd`` mounted read-only into the container), never against the container's own NSS:
``pwd.getpwuid`` inside an exporter image knows none of the host's users.

At runtime the file is re-read only when its identity (inode, size, mtime) changes, or after
``request_reload`` (SIGHUP), and the check itself is a single ``os.stat`` at most once per
``check_interval`` seconds. A missing or unreadable file at runtime is not fatal: names fall
back to the numeric uid, the failure is counted (``PasswdFile.take_errors``) and logged once
until the file is readable again. Start-up validation is ``check_passwd_file``. The file is
read through ``exporter.files`` (a FIFO, device or several-GB file is refused, never read).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping

from exporter.files import FileRefused, describe, read_file

log = logging.getLogger(__name__)

#: Kind counted in ``Snapshot.errors`` when the passwd file cannot be read at runtime.
PASSWD_ERROR_KIND = "passwd_file"

#: Larger files are refused: a passwd file is kilobytes, megabytes for very large LDAP dumps.
MAX_PASSWD_BYTES = 64 * 1024 * 1024


class PasswdFileError(ValueError):
    """A passwd file cannot be used (missing, unreadable, not passwd). The message is for users."""


_reload_requests = 0


def request_reload() -> None:
    """Make every ``PasswdFile`` re-read its file at its next check, changed or not (SIGHUP).

    Only an integer is bumped: safe to call from a signal handler.
    """
    global _reload_requests  # noqa: PLW0603 (one process-wide request counter)
    _reload_requests += 1


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
        OSError: the file cannot be opened or read, or is refused (``FileRefused``: not a
            regular file, larger than ``MAX_PASSWD_BYTES``, changing while read).
    """
    return parse_passwd(read_file(path, MAX_PASSWD_BYTES).decode("utf-8", errors="replace"))


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
    except FileRefused as err:
        raise PasswdFileError(f"passwd file {path}: {err}") from None
    except OSError as err:
        raise PasswdFileError(f"passwd file {path}: cannot be read: {describe(err)}") from None
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
        self._reloads_seen = _reload_requests
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
            requested = self._reloads_seen != _reload_requests
            if (
                not force
                and not requested
                and self._last_check is not None
                and now - self._last_check < self._check_interval
            ):
                return
            self._last_check = now
            self._reloads_seen = _reload_requests
            try:
                info = os.stat(self.path)
                identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
                if identity == self._identity and not self._failing and not requested:
                    return
                users = _read_passwd(self.path)
            except OSError as err:
                self._errors += 1
                if not self._failing:
                    log.warning("passwd file %s cannot be read (%s); users show as numeric uids "
                                "until it can", self.path, describe(err))
                self._failing = True
                if self._users:
                    self._users = {}
                    self.generation += 1
                self._identity = None
                return
            if self._failing or requested:
                log.info("passwd file %s read: %d users", self.path, len(users))
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
