"""Workload kinds: one row per kind of workload a GPU process can run in (a Kubernetes pod, a
Slurm job, a container), each next to the parser of its cgroup paths, as a metric is one row.

A row (``WorkloadKind``) is the one declaration of a kind; everything else follows from it:
the ``--<name>`` flag and its ``GPU_EXPORTER_<NAME>`` variable (``exporter.config``), which
``/proc/<pid>/cgroup`` paths are its workloads (``match``), the labels on process series and on
the per-workload families (``labels``), and the labels the idle-accounting counters, the
per-workload recording rules and the dashboard variables group by (``group_by``). A kind whose
labels are names found elsewhere than the path (a pod's in the kubelet's log tree) also has a
label resolver, by kind name, in ``exporter.attribution.workloads``.

``KINDS`` is the table, in exposition order: a process series carries the labels of the kinds
switched on in this order (each name once; ``container`` is shared by pods and plain
containers). Cgroup paths are matched in the same order, except that ``fallback`` kinds come
last. ``docs/adding-a-workload-kind.md`` walks through adding one.

A matcher takes one path's components (split at ``/``, empty and ``..`` components dropped,
original case) and returns what the path names, by the kind's own keys (label names for
values that are labels as they are, such as ``slurm_job``), or None. Paths are matched by
component, never by anchored prefix, so cgroup-namespace ``../`` prefixes, extra nesting
slices and crun's ``container`` sub-cgroup are fine. Anything no matcher knows
(``user.slice``, ``system.slice/<service>``, ``init.scope``) is a host process: ``identify``
returns None. ``docs/attribution.md`` lists the layouts with examples. Nothing here reads a
file: the owner resolver (``exporter.attribution.owners``) reads ``/proc/<pid>/cgroup`` once
per (pid, start time) and hands the text to ``identify``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

#: One kind's matcher: a path's components -> what it names (None: not this kind's layout).
Matcher: TypeAlias = Callable[[Sequence[str]], "dict[str, str] | None"]


@dataclass(frozen=True, slots=True)
class CgroupIdentity:
    """What a process's cgroup says about who runs it.

    ``kind`` is the name of the workload kind whose matcher recognised the path; ``ids`` is
    what the path names, by that kind's keys (Kubernetes: ``pod_uid`` in its dashed form as in
    the pod's metadata.uid, ``container_id`` of 64 hex characters and ``runtime`` when the path
    has them; Slurm: ``slurm_job``, numeric or the SLUID, ``slurm_step`` and ``slurm_uid`` the
    job owner's uid on cgroup v1; containers: ``container_id`` and ``runtime``).
    """

    kind: str
    ids: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class IdLabel:
    """A label a kind can add from what its cgroup path names (``CgroupIdentity.ids[name]``),
    switched on with a flag of its own (``--<flag>``, off by default: an id is new for every
    workload, so the label makes series of the same name distinct over time)."""

    name: str  # the label, and the key of ``CgroupIdentity.ids`` it reads
    flag: str
    help: str


@dataclass(frozen=True, slots=True, eq=False)  # a row is its own identity
class WorkloadKind:
    """One kind of workload: the single declaration everything else follows from.

    ``name`` is the flag (``--<name>``), the ``Workload.kind`` and ``CgroupIdentity.kind`` of
    its processes. ``labels`` are the label names on process series and per-workload families,
    in exposition order; ``group_by`` the ones (a subset, most significant first) that keep
    accounting rows apart, name the per-workload recording rules
    (``<group_by joined by _>:gpu_workload_memory_used_bytes:sum``) and get dashboard
    variables; empty: the kind's processes are accounted per user only.
    ``match`` recognises the kind's cgroup paths. ``fallback``: matched after every other kind
    (a container inside a Slurm job belongs to the job). ``id_labels``: labels from the path's
    ids, each behind its own flag; switched on, one follows the kind's labels and its
    ``group_by`` (accounting rows keep two workloads of the same name apart).
    ``allocation_labels``: for a kind whose scheduler says which GPUs it *gave* a workload (the
    kubelet's PodResources, Slurm's prolog files), the labels those allocations carry on
    ``gpu_allocation_info``.
    """

    name: str
    help: str
    labels: tuple[str, ...]
    match: Matcher
    group_by: tuple[str, ...] = ()
    fallback: bool = False
    id_labels: tuple[IdLabel, ...] = ()
    allocation_labels: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not set(self.group_by) <= set(self.labels):
            raise ValueError(f"workload kind {self.name}: group_by must be some of its labels")


# --- container runtime scopes (a pod's containers and plain containers alike) -----------------
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


def _container_ids(found: tuple[str, str | None]) -> dict[str, str]:
    container_id, runtime = found
    return {"container_id": container_id} if runtime is None else {
        "container_id": container_id, "runtime": runtime}


def _in_kubernetes(components: Sequence[str]) -> bool:
    return any("kubepods" in c.lower() for c in components)


# --- Kubernetes pods ----------------------------------------------------------------------------
_UUID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
# Static (mirror) pods have a 32-hex config hash as their UID instead of a UUID.
_POD_UID = rf"(?:{_UUID}|[0-9a-f]{{32}})"
_POD_COMPONENT = re.compile(rf"^(?:[a-z0-9_.-]*-)?pod({_POD_UID})(?:\.slice)?$")


def kubernetes_path(components: Sequence[str]) -> dict[str, str] | None:
    """A pod's UID (and its container's ID and runtime) from a ``kubepods`` path.

    The pod UID comes from ``pod<uid>`` (systemd escapes ``-`` as ``_``; static pods have a
    32-hex hash), the container ID from the first runtime component after it:
    ``cri-containerd-<id>.scope``, ``crio-<id>.scope``, ``docker-<id>.scope`` (systemd
    driver) or a bare ``<id>`` / ``crio-<id>`` (cgroupfs driver).
    """
    if not _in_kubernetes(components):
        return None
    lowered = [c.lower() for c in components]
    for position, component in enumerate(lowered):
        match = _POD_COMPONENT.match(component)
        if match is None or not any("kubepods" in c for c in lowered[: position + 1]):
            continue
        ids = {"pod_uid": match.group(1).replace("_", "-")}  # systemd escapes '-' as '_'
        for rest in lowered[position + 1 :]:
            found = _container(rest, allow_bare=True)
            if found is not None:
                return ids | _container_ids(found)
        return ids
    return None


KUBERNETES = WorkloadKind(
    "kubernetes",
    "Resolve processes to namespace/pod/container and add those labels.",
    labels=("namespace", "pod", "container"),
    match=kubernetes_path,
    group_by=("namespace", "pod"),
    id_labels=(IdLabel(
        "pod_uid", "kubernetes.pod-uid",
        "With --kubernetes: add the pod_uid label (the pod's UID, from its cgroup) to process, "
        "per-workload and accounting series, so that two pods of one name over time (a "
        "StatefulSet's pod, a restarted Job's) stay apart."),),
    allocation_labels=("namespace", "pod", "container"),
)


# --- containers outside Kubernetes --------------------------------------------------------------
#: Characters of the ID in the ``container_id`` label (what ``docker ps`` shows).
SHORT_ID = 12


def container_path(components: Sequence[str]) -> dict[str, str] | None:
    """A container's ID and runtime from a path outside Kubernetes (a pod's containers are
    the pod's).

    Docker ``docker-<id>.scope`` (systemd driver, rootful or rootless) and ``/docker/<id>``
    (cgroupfs); Podman ``libpod-<id>.scope`` (systemd, with or without crun's ``container``
    sub-cgroup), ``libpod-<id>`` and ``libpod-payload-<id>`` (cgroupfs, ``--cgroups=split``);
    containerd via nerdctl ``nerdctl-<id>.scope`` and ``cri-containerd-<id>.scope``; CRI-O
    ``crio-<id>.scope``. Conmon's ``libpod-conmon-`` and ``crio-conmon-`` scopes are monitors,
    not workloads, and are not containers.
    """
    if _in_kubernetes(components):
        return None
    for position, component in enumerate(components):
        found = _container(component.lower(), allow_bare=False)
        if found is None and position > 0 and components[position - 1] == "docker":
            found = _container(component.lower(), allow_bare=True)  # cgroupfs: /docker/<id>
            found = (found[0], "docker") if found else None
        if found is not None:
            return _container_ids(found)
    return None


def container_labels(container_id: str, name: str | None) -> dict[str, str]:
    """The ``container`` and ``container_id`` labels of a container outside Kubernetes."""
    return {"container": name or "", "container_id": container_id[:SHORT_ID]}


CONTAINERS = WorkloadKind(
    "containers",
    "Add container and container_id labels for processes in Docker, Podman, containerd or "
    "CRI-O containers outside Kubernetes.",
    labels=("container", "container_id"),
    match=container_path,
    fallback=True,
)


# --- Slurm jobs ---------------------------------------------------------------------------------
_SLURM_V1_ROOT = re.compile(r"^slurm(?:_[^/]+)?$")
_SLURM_V2_SCOPE = re.compile(r"^(?:[^/]+_)?slurmstepd\.scope$")
_SLURM_JOB = re.compile(r"^job_(\d+)$")
_SLURM_SLUID = re.compile(r"^s[0-9A-HJKMNP-TV-Z]{13}$")  # Crockford base 32: no I, L, O, U
_SLURM_UID = re.compile(r"^uid_(\d+)$")
_SLURM_STEP = re.compile(r"^step_([a-z0-9_]+)$")


def slurm_path(components: Sequence[str]) -> dict[str, str] | None:
    """A Slurm job (step, owner's uid) from a cgroup v2 or v1 job path. SLUIDs are upper case:
    the components are matched as spelled.

    cgroup v1: ``<prepend>/uid_<uid>/job_<id>/step_<step>[/task_<n>]`` with the default
    prepend ``/slurm`` (``/slurm_<node>`` with multiple slurmd). cgroup v2:
    ``[<node>_]slurmstepd.scope/job_<id>/step_<step>/{user/task_<n>,slurm}``; Slurm 26.05
    names the job directory by its SLUID (``s`` + 13 Crockford base-32 characters) unless
    ``CgroupJobIdPaths=yes``, and the SLUID is then reported as the job.
    """
    return _slurm_v2(components) or _slurm_v1(components)


def _slurm_v1(components: Sequence[str]) -> dict[str, str] | None:
    for position in range(len(components) - 2):
        if not _SLURM_V1_ROOT.match(components[position]):
            continue
        uid = _SLURM_UID.match(components[position + 1])
        job = _SLURM_JOB.match(components[position + 2])
        if uid and job:
            step = _step(components[position + 3 : position + 4])
            return {"slurm_job": job.group(1), **step, "slurm_uid": uid.group(1)}
    return None


def _slurm_v2(components: Sequence[str]) -> dict[str, str] | None:
    for position in range(len(components) - 1):
        if not _SLURM_V2_SCOPE.match(components[position]):
            continue
        name = components[position + 1]
        job = _SLURM_JOB.match(name)
        if job is None and not _SLURM_SLUID.match(name):
            return None  # slurmstepd's own "system" cgroup
        step = _step(components[position + 2 : position + 3])
        return {"slurm_job": job.group(1) if job else name, **step}
    return None


def _step(components: Sequence[str]) -> dict[str, str]:
    match = _SLURM_STEP.match(components[0].lower()) if components else None
    return {"slurm_step": match.group(1)} if match else {}


SLURM = WorkloadKind(
    "slurm",
    "Add the slurm_job label to per-process series (the job id from the process's cgroup), "
    "and read the GPUs Slurm allocated to jobs from --slurm.allocation-dir.",
    labels=("slurm_job",),
    match=slurm_path,
    group_by=("slurm_job",),
    allocation_labels=("slurm_job", "user", "uid"),
)

#: Every workload kind, in exposition order.
KINDS: tuple[WorkloadKind, ...] = (KUBERNETES, CONTAINERS, SLURM)


# --- what follows from the table ----------------------------------------------------------------
def id_label_names(kind: WorkloadKind, ids: Iterable[str]) -> tuple[str, ...]:
    """The id labels of ``kind`` among the names ``ids`` switched on, in the kind's order."""
    wanted = set(ids)
    return tuple(label.name for label in kind.id_labels if label.name in wanted)


def label_names(kinds: Iterable[WorkloadKind], ids: Iterable[str] = ()) -> tuple[str, ...]:
    """The labels of ``kinds`` in their order, each once (pods and containers share
    ``container``), each kind's id labels among ``ids`` after its own."""
    ids = tuple(ids)
    return _union((*kind.labels, *id_label_names(kind, ids)) for kind in kinds)


def allocation_label_names(kinds: Iterable[WorkloadKind]) -> tuple[str, ...]:
    """The ``allocation_labels`` of ``kinds`` in their order, each once."""
    return _union(kind.allocation_labels for kind in kinds)


def group_by_names(kinds: Iterable[WorkloadKind], ids: Iterable[str] = ()) -> tuple[str, ...]:
    """The ``group_by`` labels of ``kinds`` in their order, each once, each kind's id labels
    among ``ids`` after them (for kinds that group at all)."""
    ids = tuple(ids)
    return _union((*kind.group_by, *id_label_names(kind, ids)) for kind in kinds
                  if kind.group_by)


def _union(groups: Iterable[Sequence[str]]) -> tuple[str, ...]:
    names: dict[str, None] = {}
    for group in groups:
        names.update(dict.fromkeys(group))
    return tuple(names)


def identify(text: str) -> CgroupIdentity | None:
    """The workload that ``/proc/<pid>/cgroup`` text names, of any kind in ``KINDS`` (None: a
    host process). Never raises."""
    order = [k for k in KINDS if not k.fallback] + [k for k in KINDS if k.fallback]
    return parse_cgroup(text, [(kind.name, kind.match) for kind in order])


def parse_path(path: str, kinds: Sequence[tuple[str, Matcher]]) -> CgroupIdentity | None:
    """The workload named by one cgroup path: the first of ``kinds`` (name, matcher) whose
    matcher recognises it, or None for a host process."""
    components = [c for c in path.strip().split("/") if c and c != ".."]
    for kind, match in kinds:
        ids = match(components)
        if ids is not None:
            return CgroupIdentity(kind, ids)
    return None


def _names_more(found: CgroupIdentity, other: CgroupIdentity) -> bool:
    """True when ``other`` names the same workload as ``found`` and more of it."""
    return (other.kind == found.kind and len(other.ids) > len(found.ids)
            and all(other.ids.get(key) == value for key, value in found.ids.items()))


def parse_cgroup(text: str, kinds: Sequence[tuple[str, Matcher]]) -> CgroupIdentity | None:
    """The workload named by ``/proc/<pid>/cgroup`` text, or None for a host process.

    The unified (``0::``) line is tried first, then the v1 lines in file order (hybrid hosts
    often keep the workload's path on v1 controllers only); the first line naming a workload
    wins, unless a later line names the same workload with more (a pod's container ID missing
    on the first line). Never raises.
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
    found: CgroupIdentity | None = None
    for path in paths:
        other = parse_path(path, kinds)
        if other is not None and (found is None or _names_more(found, other)):
            found = other
    return found
