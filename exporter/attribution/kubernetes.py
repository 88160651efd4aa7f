"""Kubernetes names for a cgroup identity, from the kubelet's log tree (no API permission).

The pod UID and container ID come from the process's cgroup (parsed by
``exporter.catalogue.workloads``, read by the owner resolver once per process). Names come
from the kubelet's log tree (a read-only hostPath mount):
``/var/log/containers/<pod>_<namespace>_<container>-<containerid>.log`` (container ID ->
namespace, pod, container) and ``/var/log/pods/<namespace>_<pod>_<uid>/`` (pod UID ->
namespace, pod). Kubernetes names cannot contain ``_``, so the split is unambiguous.
Listings are cached: re-listed every ``listing_ttl`` seconds, or on a lookup miss at most
every ``miss_relist_interval`` seconds. When the tree is not mounted the names stay empty (the
process is still known to be in a pod: its workload keeps the UID and container ID).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from exporter.catalogue.workloads import CgroupIdentity

#: Kind counted in ``Snapshot.errors`` when a cgroup file or log directory cannot be read.
POD_ERROR_KIND = "pod_lookup"

_POD_UID_ONLY = re.compile(r"^(?:[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}"
                           r"[-_][0-9a-f]{12}|[0-9a-f]{32})$")
_CONTAINER_ID_ONLY = re.compile(r"^[0-9a-f]{64}$")


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


@dataclass(slots=True)
class _LogIndex:
    """Cached listings of the kubelet log tree. Not thread-safe (PodResolver locks)."""

    pod_logs_dir: str
    container_logs_dir: str
    clock: Callable[[], float]
    ttl: float
    miss_interval: float
    max_entries: int
    listed_at: float | None = None
    pods: dict[str, tuple[str, str]] = field(default_factory=dict)  # uid -> (namespace, pod)
    # container id -> (namespace, pod, container)
    containers: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    errors: int = 0

    def refresh(self, *, miss: bool) -> None:
        """Re-list if the listing is older than the TTL (or the miss interval, on a miss)."""
        now = self.clock()
        if self.listed_at is not None:
            age = now - self.listed_at
            if age < (self.miss_interval if miss else self.ttl):
                return
        self.listed_at = now
        pods: dict[str, tuple[str, str]] = {}
        for name in self._list(self.pod_logs_dir):
            parsed = parse_pod_log_dir_name(name)
            if parsed:
                pods[parsed[0]] = (parsed[1], parsed[2])
        containers: dict[str, tuple[str, str, str]] = {}
        for name in self._list(self.container_logs_dir):
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
                    if len(names) >= self.max_entries:
                        break
                    names.append(entry.name)
        except FileNotFoundError:
            return []  # the tree is not mounted: names stay unknown, which is not an error
        except OSError:
            self.errors += 1
        return names


class PodResolver:
    """Names the pod and container of a cgroup identity from the kubelet log tree.

    Thread-safe. Listing problems are counted until ``take_errors``.
    """

    def __init__(
        self,
        *,
        pod_logs_dir: str = "/var/log/pods",
        container_logs_dir: str = "/var/log/containers",
        clock: Callable[[], float] = time.monotonic,
        listing_ttl: float = 30.0,
        miss_relist_interval: float = 2.0,
        max_entries: int = 16384,
    ) -> None:
        self._lock = threading.Lock()
        self._index = _LogIndex(
            pod_logs_dir,
            container_logs_dir,
            clock=clock,
            ttl=listing_ttl,
            miss_interval=miss_relist_interval,
            max_entries=max_entries,
        )

    def take_errors(self) -> dict[str, int]:
        """Error counts by kind since the last call (only non-zero kinds), and reset them."""
        with self._lock:
            count, self._index.errors = self._index.errors, 0
            return {POD_ERROR_KIND: count} if count else {}

    def labels(self, identity: CgroupIdentity) -> dict[str, str]:
        """``namespace``, ``pod`` and ``container`` of a Kubernetes ``identity``, with whatever
        names the log tree has ("" for the others). Never raises."""
        container_id = identity.ids.get("container_id")
        with self._lock:
            self._index.refresh(miss=False)
            names = self._lookup_names(identity.ids.get("pod_uid", ""), container_id)
            if names[1] is None or (container_id is not None and names[2] is None):
                self._index.refresh(miss=True)
                names = self._lookup_names(identity.ids.get("pod_uid", ""), container_id)
        namespace, pod, container = names
        return {"namespace": namespace or "", "pod": pod or "", "container": container or ""}

    def _lookup_names(self, pod_uid: str, container_id: str | None
                      ) -> tuple[str | None, str | None, str | None]:
        namespace = pod = container = None
        if container_id is not None:
            found = self._index.containers.get(container_id)
            if found is not None:
                namespace, pod, container = found
        if pod is None:
            by_uid = self._index.pods.get(pod_uid)
            if by_uid is not None:
                namespace, pod = by_uid
        return namespace, pod, container
