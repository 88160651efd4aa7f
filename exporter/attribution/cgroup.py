"""``/proc/<pid>/cgroup`` -> who runs the process: Kubernetes pod, Slurm job, or container.

The owner resolver (``exporter.attribution.owners``) reads the file once per (pid, start time)
with ``read_cgroup`` and hands the identity on to the enricher.

One parser for every layout gpu-exporter recognises (``docs/attribution.md`` lists them with
examples). Paths are matched by component, never by anchored prefix, so cgroup-namespace
``../`` prefixes, extra nesting slices and crun's ``container`` sub-cgroup are fine.

- **Kubernetes** (a ``kubepods`` component): pod UID from ``pod<uid>`` (systemd escapes ``-``
  as ``_``; static pods have a 32-hex hash), container ID from the first runtime component after
  it: ``cri-containerd-<id>.scope``, ``crio-<id>.scope``, ``docker-<id>.scope`` (systemd
  driver) or a bare ``<id>`` / ``crio-<id>`` (cgroupfs driver).
- **Slurm**, cgroup v1: ``<prepend>/uid_<uid>/job_<id>/step_<step>[/task_<n>]`` with the
  default prepend ``/slurm`` (``/slurm_<node>`` with multiple slurmd). cgroup v2:
  ``[<node>_]slurmstepd.scope/job_<id>/step_<step>/{user/task_<n>,slurm}``; Slurm 26.05 names
  the job directory by its SLUID (``s`` + 13 Crockford base-32 characters) unless
  ``CgroupJobIdPaths=yes``, and the SLUID is then reported as the job.
- **Containers outside Kubernetes**: Docker ``docker-<id>.scope`` (systemd driver, rootful or
  rootless) and ``/docker/<id>`` (cgroupfs); Podman ``libpod-<id>.scope`` (systemd, with or
  without crun's ``container`` sub-cgroup), ``libpod-<id>`` and ``libpod-payload-<id>``
  (cgroupfs, ``--cgroups=split``); containerd via nerdctl ``nerdctl-<id>.scope`` and
  ``cri-containerd-<id>.scope``; CRI-O ``crio-<id>.scope``. Conmon's ``libpod-conmon-`` and
  ``crio-conmon-`` scopes are monitors, not workloads, and are not containers.

Anything else (``user.slice``, ``system.slice/<service>``, ``init.scope``) is a host process:
``parse_cgroup`` returns None. It never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from exporter.files import read_small

#: Most bytes of a cgroup file read (deeply nested hierarchies stay far below).
CGROUP_LIMIT = 65536

_UUID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
# Static (mirror) pods have a 32-hex config hash as their UID instead of a UUID.
_POD_UID = rf"(?:{_UUID}|[0-9a-f]{{32}})"
_POD_COMPONENT = re.compile(rf"^(?:[a-z0-9_.-]*-)?pod({_POD_UID})(?:\.slice)?$")
_HEX64 = r"[0-9a-f]{64}"
#: Runtime name by the prefix of a container scope (runc: ``<prefix>-<id>.scope``).
RUNTIME_PREFIXES: dict[str, str] = {
    "cri-containerd": "containerd",
    "containerd": "containerd",
    "nerdctl": "containerd",
    "crio": "cri-o",
    "docker": "docker",
    "libpod": "podman",
    "libpod-payload": "podman",
}
_CONTAINER_COMPONENT = re.compile(rf"^(?:([a-z][a-z-]*)-)?({_HEX64})(?:\.scope)?$")
_SLURM_V1_ROOT = re.compile(r"^slurm(?:_[^/]+)?$")
_SLURM_V2_SCOPE = re.compile(r"^(?:[^/]+_)?slurmstepd\.scope$")
_SLURM_JOB = re.compile(r"^job_(\d+)$")
_SLURM_SLUID = re.compile(r"^s[0-9A-HJKMNP-TV-Z]{13}$")  # Crockford base 32: no I, L, O, U
_SLURM_UID = re.compile(r"^uid_(\d+)$")
_SLURM_STEP = re.compile(r"^step_([a-z0-9_]+)$")


@dataclass(frozen=True, slots=True)
class CgroupIdentity:
    """What a process's cgroup says about who runs it (fields not given by the layout: None)."""

    kind: str  # "kubernetes", "slurm" or "container"
    pod_uid: str | None = None  # Kubernetes: dashed form, as in the pod's metadata.uid
    container_id: str | None = None  # 64 hex characters
    runtime: str | None = None  # "containerd", "cri-o", "docker", "podman"; None if unknown
    slurm_job: str | None = None  # numeric job id, or the SLUID on Slurm 26.05 v2 paths
    slurm_step: str | None = None  # "0", "batch", "extern", "interactive", ...
    slurm_uid: int | None = None  # the job owner's uid (cgroup v1 paths only)


def _container(component: str, *, allow_bare: bool) -> tuple[str, str | None] | None:
    """(container id, runtime) of a runtime component, or None."""
    match = _CONTAINER_COMPONENT.match(component)
    if match is None:
        return None
    prefix, container_id = match.group(1), match.group(2)
    if prefix is None:
        return (container_id, None) if allow_bare else None
    runtime = RUNTIME_PREFIXES.get(prefix)
    return (container_id, runtime) if runtime is not None else None


def _kubernetes(components: list[str]) -> CgroupIdentity | None:
    for position, component in enumerate(components):
        match = _POD_COMPONENT.match(component)
        if match is None or not any("kubepods" in c for c in components[: position + 1]):
            continue
        pod_uid = match.group(1).replace("_", "-")  # systemd escapes '-' in a name as '_'
        for rest in components[position + 1 :]:
            found = _container(rest, allow_bare=True)
            if found is not None:
                return CgroupIdentity("kubernetes", pod_uid, found[0], found[1])
        return CgroupIdentity("kubernetes", pod_uid)
    return None


def _slurm_v1(components: list[str]) -> CgroupIdentity | None:
    for position in range(len(components) - 2):
        if not _SLURM_V1_ROOT.match(components[position]):
            continue
        uid = _SLURM_UID.match(components[position + 1])
        job = _SLURM_JOB.match(components[position + 2])
        if uid and job:
            step = _step(components[position + 3 : position + 4])
            return CgroupIdentity("slurm", slurm_job=job.group(1), slurm_step=step,
                               slurm_uid=int(uid.group(1)))
    return None


def _slurm_v2(components: list[str]) -> CgroupIdentity | None:
    for position in range(len(components) - 1):
        if not _SLURM_V2_SCOPE.match(components[position]):
            continue
        name = components[position + 1]
        job = _SLURM_JOB.match(name)
        if job is None and not _SLURM_SLUID.match(name):
            return None  # slurmstepd's own "system" cgroup
        step = _step(components[position + 2 : position + 3])
        return CgroupIdentity("slurm", slurm_job=job.group(1) if job else name, slurm_step=step)
    return None


def _step(components: list[str]) -> str | None:
    match = _SLURM_STEP.match(components[0].lower()) if components else None
    return match.group(1) if match else None


def _plain_container(components: list[str]) -> CgroupIdentity | None:
    for position, component in enumerate(components):
        found = _container(component.lower(), allow_bare=False)
        if found is None and position > 0 and components[position - 1] == "docker":
            found = _container(component.lower(), allow_bare=True)  # cgroupfs: /docker/<id>
            found = (found[0], "docker") if found else None
        if found is not None:
            return CgroupIdentity("container", container_id=found[0], runtime=found[1])
    return None


def parse_path(path: str) -> CgroupIdentity | None:
    """The owner named by one cgroup path, or None for a host process."""
    components = [c for c in path.strip().split("/") if c and c != ".."]
    lowered = [c.lower() for c in components]
    if any("kubepods" in c for c in lowered):
        return _kubernetes(lowered)
    # SLUIDs are upper case: the Slurm parsers see the original spelling.
    return _slurm_v2(components) or _slurm_v1(components) or _plain_container(components)


def parse_cgroup(text: str) -> CgroupIdentity | None:
    """The owner named by ``/proc/<pid>/cgroup`` text, or None for a host process.

    The unified (``0::``) line is tried first, then the v1 lines in file order (hybrid hosts
    often keep the workload's path on v1 controllers only). A Kubernetes container ID missing
    on the first matching line is taken from another line of the same pod. Never raises.
    """
    paths: list[str] = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            paths.insert(0, parts[2])
        else:
            paths.append(parts[2])
    first: CgroupIdentity | None = None
    for path in paths:
        owner = parse_path(path)
        if owner is None:
            continue
        if first is None:
            if owner.kind != "kubernetes" or owner.container_id is not None:
                return owner
            first = owner
        elif owner.pod_uid == first.pod_uid and owner.container_id is not None:
            return owner
    return first


def read_cgroup(procfs: str, pid: int) -> CgroupIdentity | None:
    """The identity in ``<procfs>/<pid>/cgroup`` (None: a host process).

    Raises:
        OSError: the file cannot be read (FileNotFoundError/ProcessLookupError: the process
            is gone or not visible).
    """
    data = read_small(f"{procfs}/{pid}/cgroup", CGROUP_LIMIT)
    return parse_cgroup(data.decode("utf-8", errors="replace"))
