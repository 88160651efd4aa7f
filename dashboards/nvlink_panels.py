"""NVLink panels of the node dashboard: errors and state per link (group ``nvlink``, opt-in;
GPUs without NVLink have no series, so the panels stay empty there)."""

from __future__ import annotations

from dashboards.panels import GPU_LEGEND, Column, Layout, query, table_panel, timeseries_panel
from dashboards.promql import sel
from exporter.catalogue import metrics

#: Each error counter and the ``error`` label its increases get in the panel.
ERRORS = ((metrics.NVLINK_CRC_FLIT_ERRORS, "crc_flit"),
          (metrics.NVLINK_CRC_DATA_ERRORS, "crc_data"),
          (metrics.NVLINK_REPLAY_ERRORS, "replay"), (metrics.NVLINK_RECOVERY_ERRORS, "recovery"))
LINK_LEGEND = f"{GPU_LEGEND} link {{{{link}}}} {{{{error}}}}"


def _errors(matchers: str) -> str:
    """New errors per interval of every kind, labelled by kind, where any."""
    return " or ".join(
        f'label_replace(increase({sel(row, matchers)}[$__rate_interval]), "error", "{kind}", '
        '"", "") > 0' for row, kind in ERRORS)


def node_nvlink_rows(grid: Layout, matchers: str) -> None:
    """Links that count errors, and links that are not active (``--collector.nvlink``)."""
    grid.row("NVLink (--collector.nvlink)")
    grid.add(timeseries_panel(
        "NVLink errors", "New errors per interval on each NVLink link that has any: CRC errors "
        "are retried by the link (a few are normal), replays resend packets, recoveries retrain "
        "the link and stall its traffic. A link whose counts keep rising slows every collective "
        "of a multi-GPU job: reseat or replace it.", "short",
        [query(_errors(matchers), LINK_LEGEND)],
        min_val=0,
    ), 16)
    grid.add(table_panel(
        "NVLink links not active", "Links whose state is not active (0 inactive: down; 2 "
        "sleeping in low power; 3 active with traffic disabled).",
        [Column("State", f"{sel(metrics.NVLINK_STATE, matchers)} != 1", "short")],
        hidden=("Time", "__name__", "job", "instance", "uuid"),
    ), 8)
