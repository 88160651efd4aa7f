"""Workload kinds: one row per kind of workload a GPU process can run in (a Kubernetes pod, a
Slurm job, a container), as a metric is one row.

A row (``WorkloadKind``) is the one declaration of a kind; everything else follows from it:

- the ``--<name>`` flag and its ``GPU_EXPORTER_<NAME>`` variable (``exporter.config``);
- which cgroup paths are its workloads (``match``, a path matcher: ``exporter.attribution.
  cgroup`` has the built-in ones) and how their label values are found (``resolver``, or the
  matcher's ids named like the labels);
- the labels on process series and on the per-workload families (``labels``), and the labels
  the idle-accounting counters, the per-workload recording rules and the dashboard variables
  group by (``group_by``).

``KINDS`` is the table, in exposition order: a process series carries the labels of the kinds
switched on in this order (each name once; ``container`` is shared by pods and plain
containers). Cgroup paths are matched in the same order, except that ``fallback`` kinds come
last. ``docs/adding-a-workload-kind.md`` walks through adding one.

``WorkloadLabels`` is what a configuration switched on, computed once (``Config``) and handed
to enrichment, accounting and exposition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Protocol, TypeAlias

from exporter.attribution.cgroup import (
    CgroupIdentity,
    Matcher,
    container_path,
    kubernetes_path,
    parse_cgroup,
    slurm_path,
)
from exporter.snapshot import Workload

if TYPE_CHECKING:  # the configuration imports this table (for the flags)
    from exporter.config import Config

__all__ = ["CONTAINERS", "KINDS", "KUBERNETES", "SLURM", "LabelResolver", "WorkloadKind",
           "WorkloadLabels", "every_kind", "identify", "select"]


class LabelResolver(Protocol):
    """Names a workload's labels from an identity its cgroup gave (a pod's names from the
    kubelet's log tree, a container's from its runtime's files). Never raises."""

    def labels(self, identity: CgroupIdentity) -> dict[str, str]:
        """The kind's label values for ``identity`` ("" where unknown)."""
        ...

    def take_errors(self) -> dict[str, int]:
        """Error counts by kind since the last call (only non-zero kinds), and reset them."""
        ...


@dataclass(frozen=True, slots=True, eq=False)  # a row is its own identity
class WorkloadKind:
    """One kind of workload: the single declaration everything else follows from.

    ``name`` is the flag (``--<name>``), the ``Workload.kind`` and ``CgroupIdentity.kind`` of
    its processes. ``labels`` are the label names on process series and per-workload families,
    in exposition order; ``group_by`` the ones (a subset, most significant first) that keep
    accounting rows apart, name the per-workload recording rules
    (``<group_by joined by _>:gpu_workload_memory_used_bytes:sum``) and get dashboard
    variables; empty: the kind's processes are accounted per user only.
    ``match`` recognises the kind's cgroup paths; ``resolver`` builds, from the configuration
    and only when the kind is switched on, what names its labels (None: the matcher's ids under
    the label names are the values). ``fallback``: matched after every other kind (a container
    inside a Slurm job belongs to the job).
    """

    name: str
    help: str
    labels: tuple[str, ...]
    match: Matcher
    group_by: tuple[str, ...] = ()
    resolver: Callable[[Config], LabelResolver] | None = None
    fallback: bool = False

    def __post_init__(self) -> None:
        if not set(self.group_by) <= set(self.labels):
            raise ValueError(f"workload kind {self.name}: group_by must be some of its labels")

    def workload(self, identity: CgroupIdentity,
                 resolver: LabelResolver | None = None) -> Workload:
        """The ``Workload`` of a process whose cgroup gave ``identity`` (of this kind)."""
        ids = identity.ids
        labels = (resolver.labels(identity) if resolver is not None
                  else {name: ids.get(name, "") for name in self.labels})
        return Workload(self.name, labels, ids)


def _pod_names(config: Config) -> LabelResolver:
    from exporter.attribution.kubernetes import PodResolver  # noqa: PLC0415 (only when on)

    return PodResolver(pod_logs_dir=config.pod_logs_dir,
                       container_logs_dir=config.container_logs_dir)


def _container_names(config: Config) -> LabelResolver:
    from exporter.attribution.container_names import ContainerNames  # noqa: PLC0415

    return ContainerNames(docker_root=config.docker_root or None,
                          podman_storage=config.podman_storage or None)


KUBERNETES = WorkloadKind(
    "kubernetes",
    "Resolve processes to namespace/pod/container and add those labels.",
    labels=("namespace", "pod", "container"),
    match=kubernetes_path,
    group_by=("namespace", "pod"),
    resolver=_pod_names,
)
CONTAINERS = WorkloadKind(
    "containers",
    "Add container and container_id labels for processes in Docker, Podman, containerd or "
    "CRI-O containers outside Kubernetes.",
    labels=("container", "container_id"),
    match=container_path,
    resolver=_container_names,
    fallback=True,
)
SLURM = WorkloadKind(
    "slurm",
    "Add the slurm_job label to per-process series (the job id from the process's cgroup).",
    labels=("slurm_job",),
    match=slurm_path,
    group_by=("slurm_job",),
)

#: Every workload kind, in exposition order.
KINDS: tuple[WorkloadKind, ...] = (KUBERNETES, CONTAINERS, SLURM)


def identify(text: str) -> CgroupIdentity | None:
    """The workload that ``/proc/<pid>/cgroup`` text names, of any kind (None: a host
    process). Never raises."""
    order = [k for k in KINDS if not k.fallback] + [k for k in KINDS if k.fallback]
    return parse_cgroup(text, [(kind.name, kind.match) for kind in order])


def select(*names: str) -> WorkloadLabels:
    """The labels of the kinds ``names`` (table order, whatever the order given).

    Raises:
        KeyError: a name is no workload kind.
    """
    known = {kind.name for kind in KINDS}
    for name in names:
        if name not in known:
            raise KeyError(name)
    return WorkloadLabels(tuple(kind for kind in KINDS if kind.name in names))


def _union(groups: Iterable[Sequence[str]]) -> tuple[str, ...]:
    names: dict[str, None] = {}
    for group in groups:
        names.update(dict.fromkeys(group))
    return tuple(names)


def _get(labels: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple([labels.get(name, "") for name in names])


#: A workload's labels -> the values of some label names, in their order.
Picker: TypeAlias = Callable[[Mapping[str, str]], tuple[str, ...]]


def _picker(names: tuple[str, ...], own: tuple[str, ...]) -> Picker:
    """Reads the values of ``names`` from the labels of a workload of a kind whose labels are
    ``own`` ("" for the others; raises KeyError for one of ``own`` missing).

    Where the kind's names are contiguous in ``names`` (always for the built-in kinds) one
    C-level ``itemgetter`` does it: the scrape path calls this for every process (the labels
    of 128 pods: 35 us as a list of ``dict.get``, 13 us through ``WorkloadLabels.values``).
    """
    positions = [i for i, name in enumerate(names) if name in own]
    if not positions:
        blank = ("",) * len(names)
        return lambda labels: blank
    first, last = positions[0], positions[-1]
    if positions != list(range(first, last + 1)):
        return lambda labels: tuple([labels[name] if name in own else "" for name in names])
    before, after = ("",) * first, ("",) * (len(names) - last - 1)
    pick = itemgetter(*names[first : last + 1])
    if first == last:
        return lambda labels: (*before, pick(labels), *after)
    if before or after:
        return lambda labels: before + pick(labels) + after
    return pick


#: A workload (None: a host process) -> the values of some label names.
Projection: TypeAlias = Callable[[Workload | None], tuple[str, ...]]


def _projection(names: tuple[str, ...], kinds: Iterable[WorkloadKind]) -> Projection:
    """The values of ``names`` for a process in a workload: all "" for a host process or a
    workload of a kind not in ``kinds``."""
    pickers = {kind.name: _picker(names, kind.labels) for kind in kinds}
    blank = ("",) * len(names)

    def values(workload: Workload | None) -> tuple[str, ...]:
        if workload is None:
            return blank
        pick = pickers.get(workload.kind)
        if pick is None:
            return blank
        try:
            return pick(workload.labels)
        except KeyError:  # a workload lacking some of its kind's labels: those are ""
            return _get(workload.labels, names)

    return values


@dataclass(frozen=True, slots=True)
class WorkloadLabels:
    """The workload kinds switched on and the labels they put on series.

    ``names``: the labels of process series (after the owner's) and of the per-workload
    families (after the GPU's), every kind's labels in table order, each once. ``group_by``:
    the labels of the accounting counters (after ``user``).
    """

    kinds: tuple[WorkloadKind, ...] = ()
    names: tuple[str, ...] = field(init=False)
    group_by: tuple[str, ...] = field(init=False)
    #: The values of ``names`` (of ``group_by``) for a process in a workload, all "" for a host
    #: process or a workload of a kind switched off. Called for every process of every scrape.
    values: Projection = field(init=False, repr=False, compare=False)
    group_values: Projection = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = _union(kind.labels for kind in self.kinds)
        group_by = _union(kind.group_by for kind in self.kinds)
        for attribute, value in (("names", names), ("group_by", group_by),
                                 ("values", _projection(names, self.kinds)),
                                 ("group_values", _projection(group_by, self.kinds))):
            object.__setattr__(self, attribute, value)

    def on(self, kind: WorkloadKind) -> bool:
        """True when ``kind`` is switched on."""
        return any(own.name == kind.name for own in self.kinds)

    def resolvers(self, config: Config) -> Mapping[str, LabelResolver]:
        """The label resolvers of the kinds switched on that have one, by kind name."""
        return {kind.name: kind.resolver(config) for kind in self.kinds
                if kind.resolver is not None}


def every_kind() -> WorkloadLabels:
    """The labels of every kind in the table (the catalogue's label lists, the dashboards)."""
    return WorkloadLabels(KINDS)
