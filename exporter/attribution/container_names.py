"""Container ID -> name from the container runtime's own files on the host, with no API call.

- **Docker**: ``<docker-root>/containers/<id>/config.v2.json`` (default root
  ``/var/lib/docker``), the daemon's record of the container; its ``"Name"`` is stored with a
  leading ``/`` (``/trainer`` -> ``trainer``). The file is root-only (mode 0600).
- **Podman** (rootful): ``<storage>/overlay-containers/containers.json`` (default storage
  ``/var/lib/containers/storage``), containers/storage's list of ``{"id", "names", ...}``.

Not supported (the container keeps its ID only): rootless Podman's per-user storage,
containerd/nerdctl and CRI-O outside Kubernetes (their names live in the runtime's database),
Docker and Podman with storage elsewhere than the configured roots.

Names are cached per ID and re-checked when the file's mtime changes (``docker rename``),
at most every ``recheck_seconds``. Files larger than ``max_file_bytes``, and anything but a
regular file, are not read (``exporter.files``). A missing file is not an error (the runtime's
tree is not mounted, or the container is gone); an unreadable or malformed one is logged and
counted (``take_errors``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable

from exporter.catalogue.defaults import DEFAULT_DOCKER_ROOT, DEFAULT_PODMAN_STORAGE
from exporter.catalogue.workloads import CgroupIdentity, container_labels
from exporter.files import describe, read_file

log = logging.getLogger(__name__)

#: Kind counted in ``Snapshot.errors`` when a runtime file exists but cannot be read.
ERROR_KIND = "container_name"
class _Unreadable(Exception):
    pass


def _read_json(path: str, limit: int) -> object:
    """Parsed JSON of ``path``; None when missing. Raises _Unreadable otherwise (logged)."""
    try:
        data = read_file(path, limit)  # a FIFO, device or huge file is refused unread
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        problem = describe(err)
    else:
        try:
            return json.loads(data)
        except (ValueError, RecursionError) as err:
            problem = f"not JSON: {err}"
    log.warning("container runtime file %s cannot be read (%s); its container keeps its ID "
                "only", path, problem)
    raise _Unreadable(f"{path}: {problem}")


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


class ContainerNames:
    """Thread-safe lookups of container names by (runtime, 64-hex ID)."""

    def __init__(
        self,
        *,
        docker_root: str | None = DEFAULT_DOCKER_ROOT,
        podman_storage: str | None = DEFAULT_PODMAN_STORAGE,
        max_file_bytes: int = 4 << 20,
        recheck_seconds: float = 10.0,
        max_entries: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._docker_root = docker_root
        self._podman_index = (
            os.path.join(podman_storage, "overlay-containers", "containers.json")
            if podman_storage else None
        )
        self._limit = max_file_bytes
        self._recheck = recheck_seconds
        self._max_entries = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        # docker id -> (checked at, mtime, name)
        self._docker: dict[str, tuple[float, int | None, str | None]] = {}
        self._podman: dict[str, str] = {}
        self._podman_checked: tuple[float, int | None] | None = None
        self._errors = 0

    def take_errors(self) -> dict[str, int]:
        """Unreadable runtime files since the last call, as ``{ERROR_KIND: n}``."""
        with self._lock:
            count, self._errors = self._errors, 0
        return {ERROR_KIND: count} if count else {}

    def labels(self, identity: CgroupIdentity) -> dict[str, str]:
        """The labels of a container the cgroup named (its name when the runtime's files give
        it, else "")."""
        container_id = identity.ids.get("container_id", "")
        return container_labels(container_id, self.name(identity.ids.get("runtime"),
                                                        container_id))

    def name(self, runtime: str | None, container_id: str) -> str | None:
        """The container's name, or None when the runtime's files do not give it."""
        with self._lock:
            if runtime == "docker" and self._docker_root:
                return self._docker_name(container_id)
            if runtime == "podman" and self._podman_index:
                return self._podman_name(container_id)
            return None

    def _docker_name(self, container_id: str) -> str | None:
        assert self._docker_root is not None
        path = os.path.join(self._docker_root, "containers", container_id, "config.v2.json")
        now = self._clock()
        cached = self._docker.get(container_id)
        if cached is not None and now - cached[0] < self._recheck:
            return cached[2]
        mtime = _mtime(path)
        if cached is not None and mtime == cached[1]:
            self._docker[container_id] = (now, mtime, cached[2])
            return cached[2]
        try:
            config = _read_json(path, self._limit)
        except _Unreadable:
            self._errors += 1
            return None
        name = config.get("Name") if isinstance(config, dict) else None
        name = name.lstrip("/") or None if isinstance(name, str) else None
        if len(self._docker) >= self._max_entries:
            self._docker.clear()
        self._docker[container_id] = (now, mtime, name)
        return name

    def _podman_name(self, container_id: str) -> str | None:
        assert self._podman_index is not None
        now = self._clock()
        checked = self._podman_checked
        if checked is None or now - checked[0] >= self._recheck:
            mtime = _mtime(self._podman_index)
            if checked is None or mtime != checked[1]:
                self._podman = self._load_podman()
            self._podman_checked = (now, mtime)
        return self._podman.get(container_id)

    def _load_podman(self) -> dict[str, str]:
        assert self._podman_index is not None
        try:
            entries = _read_json(self._podman_index, self._limit)
        except _Unreadable:
            self._errors += 1
            return {}
        names: dict[str, str] = {}
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict):
                continue
            container_id, aliases = entry.get("id"), entry.get("names")
            if (isinstance(container_id, str) and isinstance(aliases, list) and aliases
                    and isinstance(aliases[0], str)):
                names[container_id] = aliases[0]
            if len(names) >= self._max_entries:
                break
        return names
