"""pid -> Kubernetes pod and container, without any API-server permission.

Two steps:

1. ``<procfs>/<pid>/cgroup`` -> pod UID and container ID (``parse_cgroup``). Works for cgroup
   v1, v2 and hybrid hosts, the systemd and cgroupfs kubelet drivers, containerd
   (``cri-containerd-<id>.scope``), CRI-O (``crio-<id>.scope``), docker (``docker-<id>.scope``)
   and bare ``/kubepods/<qos>/pod<uid>/<id>``, with ``../`` prefixes (cgroup namespaces) and
   extra nesting slices: paths are matched by substring, never by anchored prefix. A process
   whose cgroup mentions no ``kubepods`` is a host process -> None.
2. Names from the kubelet's log tree (a read-only hostPath mount):
   ``/var/log/containers/<pod>_<namespace>_<container>-<containerid>.log`` (container ID ->
   namespace, pod, container) and ``/var/log/pods/<namespace>_<pod>_<uid>/`` (pod UID ->
   namespace, pod). Kubernetes names cannot contain ``_``, so the split is unambiguous.
   Listings are cached: re-listed every ``listing_ttl`` seconds, or on a lookup miss at most
   every ``miss_relist_interval`` seconds. When the tree is not mounted the ``PodRef`` has the
   UID and container ID only.

Per pid, the cgroup identity is cached by (pid, process start time) when the caller knows the
start time (the owner enricher ran first), so the warm path reads no file at all.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from exporter.attribution.pidcache import CollectionScoped
from exporter.snapshot import PodRef

#: Kind counted in ``Snapshot.errors`` when a cgroup file or log directory cannot be read.
POD_ERROR_KIND = "pod_lookup"

_UUID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
# Static (mirror) pods have a 32-hex config hash as their UID instead of a UUID.
_POD_UID = rf"(?:{_UUID}|[0-9a-f]{{32}})"
_POD_IN_PATH = re.compile(rf"(?:^|[/-])pod({_POD_UID})(?:\.slice)?(?=/|$)")
# Runtime prefixes seen: cri-containerd-, crio-, docker-, containerd-; cgroupfs has none.
_CONTAINER_COMPONENT = re.compile(r"^(?:[a-z][a-z0-9-]*-)?([0-9a-f]{64})(?:\.scope)?$")
_POD_UID_ONLY = re.compile(rf"^{_POD_UID}$")
_CONTAINER_ID_ONLY = re.compile(r"^[0-9a-f]{64}$")
_CGROUP_LIMIT = 65536


@dataclass(frozen=True, slots=True)
class CgroupIdentity:
    """What a cgroup path tells about a containerised process."""

    pod_uid: str  # dashed form, as in the pod's metadata.uid
    container_id: str | None


def _identity_in_path(path: str) -> CgroupIdentity | None:
    if "kubepods" not in path:
        return None
    match = _POD_IN_PATH.search(path)
    if match is None:
        return None
    pod_uid = match.group(1).replace("_", "-")  # systemd escapes '-' in a name as '_'
    for component in path[match.end() :].split("/"):
        found = _CONTAINER_COMPONENT.match(component)
        if found:
            return CgroupIdentity(pod_uid, found.group(1))
    return CgroupIdentity(pod_uid, None)


def parse_cgroup(text: str) -> CgroupIdentity | None:
    """Pod UID and container ID from ``/proc/<pid>/cgroup`` text, or None for a host process.

    The unified (``0::``) line is tried first, then the v1 lines; a container ID missing on the
    first matching line is taken from another line of the same pod. Never raises.
    """
    paths: list[str] = []
    for line in text.lower().splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            paths.insert(0, parts[2])
        else:
            paths.append(parts[2])
    first: CgroupIdentity | None = None
    for path in paths:
        identity = _identity_in_path(path)
        if identity is None or (first is not None and identity.pod_uid != first.pod_uid):
            continue
        if identity.container_id is not None:
            return identity
        first = first or identity
    return first


def parse_container_log_name(name: str) -> tuple[str, str, str, str] | None:
    """``<pod>_<namespace>_<container>-<id>.log`` -> (id, namespace, pod, container) or None."""
    if not name.endswith(".log"):
        return None
    rest, _, container_id = name[:-4].rpartition("-")
    parts = rest.split("_")
    if len(parts) != 3 or not all(parts) or not _CONTAINER_ID_ONLY.match(container_id):
        return None
    pod, namespace, container = parts
    return container_id, namespace, pod, container


def parse_pod_log_dir_name(name: str) -> tuple[str, str, str] | None:
    """``<namespace>_<pod>_<uid>`` -> (uid, namespace, pod) or None."""
    parts = name.split("_")
    if len(parts) != 3 or not all(parts) or not _POD_UID_ONLY.match(parts[2]):
        return None
    namespace, pod, uid = parts
    return uid, namespace, pod


class _LogIndex:
    """Cached listings of the kubelet log tree. Not thread-safe (PodResolver locks)."""

    def __init__(
        self,
        pod_logs_dir: str,
        container_logs_dir: str,
        *,
        clock: Callable[[], float],
        ttl: float,
        miss_interval: float,
        max_entries: int,
    ) -> None:
        self._pod_logs_dir = pod_logs_dir
        self._container_logs_dir = container_logs_dir
        self._clock = clock
        self._ttl = ttl
        self._miss_interval = miss_interval
        self._max_entries = max_entries
        self._listed_at: float | None = None
        self.pods: dict[str, tuple[str, str]] = {}  # uid -> (namespace, pod)
        self.containers: dict[str, tuple[str, str, str]] = {}  # id -> (namespace, pod, container)
        self.errors = 0

    def refresh(self, *, miss: bool) -> None:
        """Re-list if the listing is older than the TTL (or the miss interval, on a miss)."""
        now = self._clock()
        if self._listed_at is not None:
            age = now - self._listed_at
            if age < (self._miss_interval if miss else self._ttl):
                return
        self._listed_at = now
        pods: dict[str, tuple[str, str]] = {}
        for name in self._list(self._pod_logs_dir):
            parsed = parse_pod_log_dir_name(name)
            if parsed:
                pods[parsed[0]] = (parsed[1], parsed[2])
        containers: dict[str, tuple[str, str, str]] = {}
        for name in self._list(self._container_logs_dir):
            found = parse_container_log_name(name)
            if found:
                containers[found[0]] = found[1:]
        self.pods, self.containers = pods, containers

    def _list(self, directory: str) -> list[str]:
        """Entry names (at most ``max_entries``); [] if missing, counted if unreadable."""
        names: list[str] = []
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    if len(names) >= self._max_entries:
                        break
                    names.append(entry.name)
        except FileNotFoundError:
            return []  # the tree is not mounted: names stay unknown, which is not an error
        except OSError:
            self.errors += 1
        return names


class PodResolver(CollectionScoped[tuple[float, CgroupIdentity | None], PodRef | None]):
    """Resolves pids to ``PodRef`` from cgroups and the kubelet log tree. Thread-safe.

    Use ``with resolver.collection(): ...`` around one snapshot's lookups (each pid is read at
    most once inside it; afterwards cached pids not looked up are evicted).
    """

    def __init__(
        self,
        *,
        procfs: str = "/proc",
        pod_logs_dir: str = "/var/log/pods",
        container_logs_dir: str = "/var/log/containers",
        clock: Callable[[], float] = time.monotonic,
        listing_ttl: float = 30.0,
        miss_relist_interval: float = 2.0,
        max_entries: int = 16384,
    ) -> None:
        # Cache entries: (process start time, cgroup identity); the memo: this collection's refs.
        super().__init__(max_entries)
        self._procfs = procfs.rstrip("/")
        self._index = _LogIndex(
            pod_logs_dir,
            container_logs_dir,
            clock=clock,
            ttl=listing_ttl,
            miss_interval=miss_relist_interval,
            max_entries=max_entries,
        )
        self._errors = 0

    def take_errors(self) -> dict[str, int]:
        """Error counts by kind since the last call (only non-zero kinds), and reset them."""
        with self._lock:
            count = self._errors + self._index.errors
            self._errors = self._index.errors = 0
            return {POD_ERROR_KIND: count} if count else {}

    def resolve(self, pid: int, *, start_time: float | None = None) -> PodRef | None:
        """The pod and container of ``pid``; None for host processes or unreadable cgroups.

        ``start_time`` (the process's start time, from its owner) enables the cache: a pid
        with the same start time is the same process and its cgroup is not read again.
        Never raises.
        """
        return self._memoised(pid, lambda: self._resolve(pid, start_time))

    def _resolve(self, pid: int, start_time: float | None) -> PodRef | None:
        self._pids.touch(pid)
        identity = self._identity(pid, start_time)
        return self._names(identity) if identity is not None else None

    def _identity(self, pid: int, start_time: float | None) -> CgroupIdentity | None:
        cached = self._pids.entries.get(pid)
        if start_time is not None and cached is not None and cached[0] == start_time:
            return cached[1]
        try:
            fd = os.open(f"{self._procfs}/{pid}/cgroup", os.O_RDONLY | os.O_CLOEXEC)
            try:
                data = os.read(fd, _CGROUP_LIMIT)
            finally:
                os.close(fd)
        except (FileNotFoundError, ProcessLookupError):
            self._pids.entries.pop(pid, None)
            return None  # gone or not visible: the owner enricher decides and counts
        except OSError:
            self._errors += 1
            return None
        identity = parse_cgroup(data.decode("utf-8", errors="replace"))
        if start_time is not None:
            self._pids.put(pid, (start_time, identity))
        return identity

    def _names(self, identity: CgroupIdentity) -> PodRef:
        self._index.refresh(miss=False)
        ref = self._lookup_names(identity)
        if ref.pod is None or (identity.container_id is not None and ref.container is None):
            self._index.refresh(miss=True)
            ref = self._lookup_names(identity)
        return ref

    def _lookup_names(self, identity: CgroupIdentity) -> PodRef:
        namespace = pod = container = None
        if identity.container_id is not None:
            found = self._index.containers.get(identity.container_id)
            if found is not None:
                namespace, pod, container = found
        if pod is None:
            by_uid = self._index.pods.get(identity.pod_uid)
            if by_uid is not None:
                namespace, pod = by_uid
        return PodRef(
            pod_uid=identity.pod_uid,
            container_id=identity.container_id,
            namespace=namespace,
            pod=pod,
            container=container,
        )
