"""NVLink errors and state per link (group ``nvlink``, opt-in).

A link that retrains or replays often slows every collective of a multi-GPU job long before it
fails; dcgm-exporter's NVLink CRC, replay and recovery counters are how operators find it. The
rows are read in the one ``nvmlDeviceGetFieldValues`` call per GPU that reads every field-value
row (``exporter.sources.nvml.fields``), only on GPUs that report NVLink links
(``NVML_FI_DEV_NVLINK_LINK_COUNT``) and only for the links they have: a GPU without NVLink has
none of these series (never a 0).

Ids are nvml.h's. Since Hopper (R525), NVML counts errors per link through the fields
``NVML_FI_DEV_NVLINK_ERROR_DL_CRC`` / ``_REPLAY`` / ``_RECOVERY`` with the link as scope and no
longer answers the per-link ``..._L<n>`` fields of links 0-11 that Volta and Ampere use; each
link keeps whichever of the two its GPU answers. ``NVML_FI_DEV_NVLINK_GET_STATE`` (R525+) is
the link's state. Blackwell's NVLink 5 dropped the three DL counters as well; it reports none
of the error rows.
"""

from __future__ import annotations

from exporter.catalogue.metrics.core import (
    GPU_LABELS,
    FieldId,
    FieldRead,
    Group,
    Kind,
    Metric,
    NvmlFields,
    Since,
)

#: Links a GPU may have (``NVML_NVLINK_MAX_LINKS`` of nvml.h 13.0), as ``link`` label values.
MAX_LINKS = 36
LINKS: tuple[str, ...] = tuple(str(link) for link in range(MAX_LINKS))
#: ``NVML_FI_DEV_NVLINK_LINK_COUNT``: how many links the GPU has (read once per GPU).
LINK_COUNT = FieldId("NVML_FI_DEV_NVLINK_LINK_COUNT", 91)
#: nvml.h's per-link fields of links 0-11 (Volta, Ampere): the ids of links 0-5 and of 6-11.
_LEGACY_IDS: dict[str, tuple[int, int]] = {
    "CRC_FLIT": (32, 96),
    "CRC_DATA": (39, 102),
    "REPLAY": (46, 108),
    "RECOVERY": (53, 114),
}
#: The per-link fields of Hopper and later (scope = the link).
_SCOPED_IDS: dict[str, tuple[str, int]] = {
    "CRC_FLIT": ("NVML_FI_DEV_NVLINK_ERROR_DL_CRC", 163),
    "REPLAY": ("NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY", 161),
    "RECOVERY": ("NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY", 162),
}


def legacy_field(kind: str, link: int) -> FieldId | None:
    """``NVML_FI_DEV_NVLINK_<kind>_ERROR_COUNT_L<link>`` (None past link 11)."""
    if link >= 12:
        return None
    first, sixth = _LEGACY_IDS[kind]
    return FieldId(f"NVML_FI_DEV_NVLINK_{kind}_ERROR_COUNT_L{link}",
                   first + link if link < 6 else sixth + link - 6)


def _per_link(kind: str) -> tuple[FieldRead, ...]:
    reads = []
    for link in range(MAX_LINKS):
        fields = []
        if kind in _SCOPED_IDS:
            name, field_id = _SCOPED_IDS[kind]
            fields.append(FieldId(name, field_id, link))
        legacy = legacy_field(kind, link)
        if legacy is not None:
            fields.append(legacy)
        if fields:
            reads.append(FieldRead(str(link), tuple(fields)))
    return tuple(reads)


def _errors(kind: str, stem: str, help_text: str, dcgm: str) -> Metric:
    return Metric(
        f"gpu_nvlink_{stem}_errors_total", Kind.COUNTER, Group.NVLINK,
        f"{help_text} on this NVLink link since the driver loaded. dcgm-exporter: "
        f"DCGM_FI_DEV_NVLINK_{dcgm}_ERROR_COUNT_L<link>.",
        labels=(*GPU_LABELS, "link"), label_values=LINKS,
        nvml=NvmlFields(_per_link(kind), nvlink=True),
        json_field=f"nvlink_{stem}_errors", json_type=int, since=Since.DRIVER,
    )


NVLINK_CRC_FLIT_ERRORS = _errors(
    "CRC_FLIT", "crc_flit",
    "Flow-control units (flits) received with a CRC error and retried", "CRC_FLIT",
)
NVLINK_CRC_DATA_ERRORS = _errors(
    "CRC_DATA", "crc_data",
    "Data packets received with a CRC error (links 0-11 of GPUs before Hopper)", "CRC_DATA",
)
NVLINK_REPLAY_ERRORS = _errors(
    "REPLAY", "replay",
    "Packets the link had to send again (replays)", "REPLAY",
)
NVLINK_RECOVERY_ERRORS = _errors(
    "RECOVERY", "recovery",
    "Times the link went down and retrained (recoveries: a recovering link stalls traffic)",
    "RECOVERY",
)
NVLINK_STATE = Metric(
    "gpu_nvlink_link_state", Kind.GAUGE, Group.NVLINK,
    "State of this NVLink link as NVML reports it: 1 active, 0 inactive (down), 2 sleeping "
    "(low power), 3 active with traffic disabled. Absent on GPUs without NVLink.",
    labels=(*GPU_LABELS, "link"), label_values=LINKS,
    nvml=NvmlFields(tuple(FieldRead(str(link), (FieldId("NVML_FI_DEV_NVLINK_GET_STATE", 165,
                                                         link),))
                          for link in range(MAX_LINKS)), nvlink=True),
    json_field="nvlink_state", json_type=int,
)
