"""Typed JSON for ``/api/v1/snapshot``: pydantic models mirroring ``exporter.snapshot``.

Identity, health, owner and pod fields are written here; every metric row with a
``json_field`` adds its field (``GpuModel`` for per-GPU rows, ``ProcessModel`` for per-process
rows), so a new row reaches the JSON without touching this file.

FastAPI documents these in OpenAPI through ``response_model=SnapshotResponse``. ``null``
means "not supported or not read" (the same ``None`` the metrics leave out). Readings of
collector groups that are switched off are ``null`` and processes are omitted when the
``processes`` group is off, so the JSON never shows what ``/metrics`` was told to hide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from exporter.catalogue.metrics import GPU_ROWS, PROCESS_ROWS, Group, Metric
from exporter.catalogue.workloads import KUBERNETES
from exporter.snapshot import GpuProcess, GpuReading, ProcessType, Workload
from exporter.state import ExporterState, ExpositionOptions

__all__ = ["GpuModel", "PodModel", "ProcessModel", "SnapshotResponse", "gpu_model",
           "process_model"]

_CONFIG = ConfigDict(frozen=True, extra="forbid")


class PodModel(BaseModel):
    """The Kubernetes container a process runs in."""

    model_config = _CONFIG
    pod_uid: str = Field(description="Pod UID, from the process's cgroup.")
    container_id: str | None = Field(None, description="Container runtime ID.")
    namespace: str | None = Field(None, description="Pod namespace.")
    pod: str | None = Field(None, description="Pod name.")
    container: str | None = Field(None, description="Container name.")


def _row_fields(rows: tuple[Metric, ...]) -> dict[str, Any]:
    """pydantic field definitions of the rows with a ``json_field`` (see ``Metric``)."""
    fields: dict[str, Any] = {}
    for row in rows:
        if row.json_field is None:
            continue
        what = row.help.split(". ")[0].rstrip(".") + f" ({row.name})."
        if "{}" in row.json_field:  # one field per value of the extra label
            for label in row.label_values:
                fields[row.json_field.format(label)] = (
                    row.json_type | None, Field(None, description=f"{what} {label}"))
        elif row.label_values:  # an object keyed by the extra label's values
            fields[row.json_field] = (dict[str, row.json_type] | None,  # type: ignore[name-defined]
                                      Field(None, description=what))
        else:
            fields[row.json_field] = (row.json_type | None, Field(None, description=what))
    return fields


def _json_values(rows: tuple[Metric, ...], values: Mapping[str, Any],
                 groups: frozenset[Group]) -> dict[str, Any]:
    """The JSON fields of ``rows`` from a value store; rows of switched-off groups are null."""
    out: dict[str, Any] = {}
    for row in rows:
        field_name = row.json_field
        if field_name is None or row.group not in groups:
            continue
        value = values.get(row.name)
        if value is None:
            continue
        if "{}" in field_name:
            for label in row.label_values:
                if label in value:
                    out[field_name.format(label)] = _cast(row, value[label])
        elif isinstance(value, Mapping):
            out[field_name] = {k: _cast(row, v) for k, v in value.items()}
        else:
            out[field_name] = _cast(row, value)
    return out


def _copy(source: object, names: tuple[str, ...]) -> dict[str, Any]:
    """The attributes ``names`` of ``source`` (snapshot and JSON fields share their names)."""
    return {name: getattr(source, name) for name in names}


def _cast(row: Metric, value: float) -> Any:
    return row.json_type(value)


class _ProcessBase(BaseModel):
    """One process holding a context on a GPU."""

    model_config = _CONFIG
    pid: int = Field(description="Host PID, as NVML reports it.")
    type: ProcessType = Field(description="Which NVML process list(s) the process was found in.")
    user: str | None = Field(None, description="Owner's user name (or uid); null if unknown.")
    uid: int | None = Field(None, description="Owner's numeric uid; null if unknown.")
    process_name: str | None = Field(None, description="Process name (comm); null if unknown.")
    cmdline: str | None = Field(
        None, description="Command line; null unless the operator opted in to collecting it."
    )
    pod: PodModel | None = Field(None, description="Kubernetes container; null on the host.")


class _GpuBase(BaseModel):
    """One GPU: identity, readings of the last collection (one field per metric row with a
    JSON field; null when not read or its group is off), processes."""

    model_config = _CONFIG
    index: int = Field(description="NVML device index.")
    uuid: str = Field(description="GPU UUID.")
    name: str = Field(description="Model name.")
    pci_bus_id: str = Field(description="PCI bus ID.")
    serial: str | None = Field(None, description="Board serial number.")
    vbios_version: str | None = Field(None, description="VBIOS version.")
    up: bool = Field(description="False when the GPU could not be read (then readings are null).")
    error: str | None = Field(None, description="Why the GPU could not be read.")
    power_limit_default_watts: float | None = Field(None, description="Default limit, watts.")


if TYPE_CHECKING:  # the type checker sees the static part; the row fields are added below
    ProcessModel = _ProcessBase
else:
    ProcessModel = create_model("ProcessModel", __base__=_ProcessBase,
                                **_row_fields(PROCESS_ROWS))
    ProcessModel.__doc__ = _ProcessBase.__doc__


class _GpuProcesses(_GpuBase):
    processes: list[ProcessModel] = Field(
        default_factory=list, description="Processes with a context on this GPU."
    )


if TYPE_CHECKING:
    GpuModel = _GpuProcesses
else:
    GpuModel = create_model("GpuModel", __base__=_GpuProcesses, **_row_fields(GPU_ROWS))
    GpuModel.__doc__ = _GpuBase.__doc__


def pod_model(workload: Workload | None) -> PodModel | None:
    """The Kubernetes container of a process in a pod (None for any other process)."""
    if workload is None or workload.kind != KUBERNETES.name:
        return None
    labels, ids = workload.labels, workload.ids
    return PodModel(pod_uid=ids.get("pod_uid", ""), container_id=ids.get("container_id"),
                    namespace=labels.get("namespace") or None, pod=labels.get("pod") or None,
                    container=labels.get("container") or None)


def process_model(process: GpuProcess, groups: frozenset[Group]) -> ProcessModel:
    """Mirror one ``GpuProcess`` (rows of switched-off groups are null)."""
    owner = process.owner
    row_values = {row.name: value for row in PROCESS_ROWS
                  if row.process_value and (value := row.process_value(process)) is not None}
    return ProcessModel(
        pid=process.pid,
        type=process.type,
        user=owner.user if owner else None,
        uid=owner.uid if owner else None,
        process_name=owner.name if owner else None,
        cmdline=owner.cmdline if owner else None,
        pod=pod_model(process.workload),
        **_json_values(PROCESS_ROWS, row_values, groups),
    )


def gpu_model(gpu: GpuReading, groups: frozenset[Group]) -> GpuModel:
    """Mirror one ``GpuReading``, nulling readings of switched-off groups."""
    identity = gpu.identity
    return GpuModel(
        **_copy(identity, ("index", "uuid", "name", "pci_bus_id", "serial", "vbios_version")),
        up=gpu.up,
        error=gpu.error,
        power_limit_default_watts=(identity.power_limit_default_watts
                                   if Group.POWER in groups else None),
        processes=([process_model(p, groups) for p in gpu.processes]
                   if Group.PROCESSES in groups else []),
        **_json_values(GPU_ROWS, gpu.values, groups),
    )


class SnapshotResponse(BaseModel):
    """The snapshot a scrape would serve now, with its freshness."""

    model_config = _CONFIG
    source: str = Field(description='Data source: "nvml" or "simulated".')
    hostname: str = Field(description="Host the exporter runs on.")
    taken_at: float = Field(description="When the collection started, Unix seconds.")
    duration_seconds: float = Field(description="How long the collection took, seconds.")
    data_age_seconds: float = Field(description="Age of this data now, seconds.")
    stale: bool = Field(description="True when the data is older than the freshness limit.")
    last_success_timestamp: float | None = Field(
        None, description="Last collection that read every GPU, Unix seconds; null if none yet."
    )
    source_up: bool = Field(description="False when the source itself is down (then no gpus).")
    source_error: str | None = Field(None, description="Why the source is down.")
    driver_version: str | None = Field(None, description="NVIDIA driver version.")
    cuda_driver_version: str | None = Field(None, description='CUDA driver API, e.g. "12.4".')
    nvml_version: str | None = Field(None, description="NVML library version.")
    errors: dict[str, int] = Field(
        default_factory=dict, description="Problems in this collection, by kind."
    )
    errors_total: dict[str, int] = Field(
        default_factory=dict, description="Problems since start, by kind."
    )
    gpus: list[GpuModel] = Field(default_factory=list, description="Every GPU, in index order.")

    @classmethod
    def from_state(cls, state: ExporterState, options: ExpositionOptions) -> SnapshotResponse:
        """Mirror ``state`` under ``options`` (groups switched off are hidden)."""
        snap = state.snapshot
        return cls(
            **_copy(snap, ("source", "hostname", "taken_at", "duration_seconds", "source_up",
                           "source_error", "driver_version", "cuda_driver_version",
                           "nvml_version")),
            data_age_seconds=max(state.data_age_seconds, 0.0),
            stale=state.stale,
            last_success_timestamp=state.last_success_timestamp,
            errors=dict(snap.errors),
            errors_total=dict(state.errors_total),
            gpus=[
                gpu_model(g, options.groups)
                for g in sorted(snap.gpus, key=lambda g: g.identity.index)
            ],
        )
