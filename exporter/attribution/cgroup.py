"""What a process's cgroup says about it: the Kubernetes pod and container it runs in.

``parse_cgroup`` reads ``/proc/<pid>/cgroup`` text. Works for cgroup v1, v2 and hybrid hosts,
the systemd and cgroupfs kubelet drivers, containerd (``cri-containerd-<id>.scope``), CRI-O
(``crio-<id>.scope``), docker (``docker-<id>.scope``) and bare
``/kubepods/<qos>/pod<uid>/<id>``, with ``../`` prefixes (cgroup namespaces) and extra nesting
slices: paths are matched by substring, never by anchored prefix. A process whose cgroup
mentions no ``kubepods`` is a host process -> None.

This is the place for what else a cgroup path tells (Slurm jobs, plain containers): the
owner resolver reads the file once per (pid, start time) and hands the text's identity on.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

#: Most bytes of a cgroup file read (deeply nested hierarchies stay far below).
CGROUP_LIMIT = 65536

_UUID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
# Static (mirror) pods have a 32-hex config hash as their UID instead of a UUID.
_POD_UID = rf"(?:{_UUID}|[0-9a-f]{{32}})"
_POD_IN_PATH = re.compile(rf"(?:^|[/-])pod({_POD_UID})(?:\.slice)?(?=/|$)")
# Runtime prefixes seen: cri-containerd-, crio-, docker-, containerd-; cgroupfs has none.
_CONTAINER_COMPONENT = re.compile(r"^(?:[a-z][a-z0-9-]*-)?([0-9a-f]{64})(?:\.scope)?$")


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




def read_cgroup(procfs: str, pid: int) -> CgroupIdentity | None:
    """The identity in ``<procfs>/<pid>/cgroup`` (None: a host process).

    Raises:
        OSError: the file cannot be read (FileNotFoundError/ProcessLookupError: the process
            is gone or not visible).
    """
    fd = os.open(f"{procfs}/{pid}/cgroup", os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, CGROUP_LIMIT)
    finally:
        os.close(fd)
    return parse_cgroup(data.decode("utf-8", errors="replace"))
