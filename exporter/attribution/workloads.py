"""What the workload kinds switched on put on series, and what names their workloads.

The kinds themselves are rows of ``exporter.catalogue.workloads`` (flag, labels, ``group_by``,
cgroup-path parser). Here, on the attribution side:

- ``WorkloadLabels``: the kinds a configuration switched on and the labels they put on
  series, computed once (``Config``) and handed to enrichment, accounting and exposition;
- ``RESOLVERS``: for a kind whose cgroup path gives IDs while its labels are names found
  elsewhere (a pod's names in the kubelet's log tree, a container's in its runtime's files),
  what builds its ``LabelResolver`` from the configuration, only when the kind is switched on;
- ``workload``: the ``Workload`` of a process whose cgroup named a kind's path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Protocol, TypeAlias

from exporter.catalogue.workloads import (
    CONTAINERS,
    KINDS,
    KUBERNETES,
    CgroupIdentity,
    WorkloadKind,
    group_by_names,
    id_label_names,
    label_names,
)
from exporter.snapshot import Workload

__all__ = ["RESOLVERS", "LabelResolver", "ResolverSettings", "WorkloadLabels", "every_kind",
           "select", "workload"]


class LabelResolver(Protocol):
    """Names a workload's labels from an identity its cgroup gave (a pod's names from the
    kubelet's log tree, a container's from its runtime's files). Never raises."""

    def labels(self, identity: CgroupIdentity) -> dict[str, str]:
        """The kind's label values for ``identity`` ("" where unknown)."""
        ...

    def take_errors(self) -> dict[str, int]:
        """Error counts by kind since the last call (only non-zero kinds), and reset them."""
        ...


class ResolverSettings(Protocol):
    """What the resolvers read of the configuration (``exporter.config.Config`` has it)."""

    @property
    def pod_logs_dir(self) -> str: ...
    @property
    def container_logs_dir(self) -> str: ...
    @property
    def docker_root(self) -> str: ...
    @property
    def podman_storage(self) -> str: ...


def _pod_names(settings: ResolverSettings) -> LabelResolver:
    from exporter.attribution.kubernetes import PodResolver  # noqa: PLC0415 (only when on)

    return PodResolver(pod_logs_dir=settings.pod_logs_dir,
                       container_logs_dir=settings.container_logs_dir)


def _container_names(settings: ResolverSettings) -> LabelResolver:
    from exporter.attribution.container_names import ContainerNames  # noqa: PLC0415

    return ContainerNames(docker_root=settings.docker_root or None,
                          podman_storage=settings.podman_storage or None)


#: The kinds whose labels a resolver names, by kind name: what builds it, when switched on.
RESOLVERS: dict[str, Callable[[ResolverSettings], LabelResolver]] = {
    KUBERNETES.name: _pod_names,
    CONTAINERS.name: _container_names,
}


def workload(kind: WorkloadKind, identity: CgroupIdentity,
             resolver: LabelResolver | None = None) -> Workload:
    """The ``Workload`` of a process whose cgroup gave ``identity`` (of ``kind``): the
    resolver's labels, or without one the path's ids under the kind's label names."""
    ids = identity.ids
    labels = (resolver.labels(identity) if resolver is not None
              else {name: ids.get(name, "") for name in kind.labels})
    return Workload(kind.name, labels, ids)


def select(*names: str, ids: frozenset[str] = frozenset()) -> WorkloadLabels:
    """The labels of the kinds ``names`` (table order, whatever the order given), with the id
    labels ``ids`` switched on.

    Raises:
        KeyError: a name is no workload kind, or an id no kind's id label.
    """
    known = {kind.name for kind in KINDS}
    known_ids = {label.name for kind in KINDS for label in kind.id_labels}
    for name in (*names, *ids):
        if name not in known and name not in known_ids:
            raise KeyError(name)
    return WorkloadLabels(tuple(kind for kind in KINDS if kind.name in names), ids)


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


def _projection(names: tuple[str, ...], kinds: Iterable[WorkloadKind],
                ids: frozenset[str] = frozenset()) -> Projection:
    """The values of ``names`` for a process in a workload: all "" for a host process or a
    workload of a kind not in ``kinds``. A kind's id labels among ``ids`` read the workload's
    ids (its cgroup's)."""
    pickers: dict[str, Picker] = {}
    extras: dict[str, tuple[str, ...]] = {}
    for kind in kinds:
        extra = id_label_names(kind, ids)
        pickers[kind.name] = _picker(names, (*kind.labels, *extra))
        if extra:
            extras[kind.name] = extra
    blank = ("",) * len(names)

    def values(workload: Workload | None) -> tuple[str, ...]:
        if workload is None:
            return blank
        pick = pickers.get(workload.kind)
        if pick is None:
            return blank
        labels = workload.labels
        extra = extras.get(workload.kind)
        if extra is not None:
            labels = {**labels, **{name: workload.ids.get(name, "") for name in extra}}
        try:
            return pick(labels)
        except KeyError:  # a workload lacking some of its kind's labels: those are ""
            return _get(labels, names)

    return values


@dataclass(frozen=True, slots=True)
class WorkloadLabels:
    """The workload kinds switched on and the labels they put on series.

    ``names``: the labels of process series (after the owner's) and of the per-workload
    families (after the GPU's), every kind's labels in table order, each once, each kind's id
    labels switched on (``ids``) after its own. ``group_by``: the labels of the accounting
    counters (after ``user``).
    """

    kinds: tuple[WorkloadKind, ...] = ()
    ids: frozenset[str] = frozenset()  # id labels switched on (``--kubernetes.pod-uid``)
    names: tuple[str, ...] = field(init=False)
    group_by: tuple[str, ...] = field(init=False)
    #: The values of ``names`` (of ``group_by``) for a process in a workload, all "" for a host
    #: process or a workload of a kind switched off. Called for every process of every scrape.
    values: Projection = field(init=False, repr=False, compare=False)
    group_values: Projection = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = label_names(self.kinds, self.ids)
        group_by = group_by_names(self.kinds, self.ids)
        for attribute, value in (("names", names), ("group_by", group_by),
                                 ("values", _projection(names, self.kinds, self.ids)),
                                 ("group_values", _projection(group_by, self.kinds, self.ids))):
            object.__setattr__(self, attribute, value)

    def on(self, kind: WorkloadKind) -> bool:
        """True when ``kind`` is switched on."""
        return any(own.name == kind.name for own in self.kinds)

    def resolvers(self, settings: ResolverSettings) -> Mapping[str, LabelResolver]:
        """The label resolvers of the kinds switched on that have one, by kind name."""
        return {kind.name: RESOLVERS[kind.name](settings) for kind in self.kinds
                if kind.name in RESOLVERS}


def every_kind() -> WorkloadLabels:
    """Every kind of the table switched on (the golden files' and tests' widest labels)."""
    return WorkloadLabels(KINDS)
