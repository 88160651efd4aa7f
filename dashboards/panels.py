"""Small builders for the panels every dashboard uses, plus an explicit grid layout.

Every panel and every query points at the ``${datasource}`` variable; panels get explicit ids
and grid positions from ``Layout`` so nothing depends on the SDK's automatic placement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from grafana_foundation_sdk.builders import bargauge, dashboard, prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders import common as common_builder
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.models import common as common_model
from grafana_foundation_sdk.models import dashboard as dashboard_model
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

DATASOURCE = common_model.DataSourceRef(type_val="prometheus", uid="${datasource}")
#: Legends of per-GPU, per-MIG-instance and per-MIG-device series.
GPU_LEGEND = "GPU {{gpu}}"
MIG_INSTANCE_LEGEND = f"{GPU_LEGEND} GI {{{{gpu_instance}}}} {{{{gpu_profile}}}}"
MIG_DEVICE_LEGEND = f"{GPU_LEGEND} GI {{{{gpu_instance}}}}/CI {{{{compute_instance}}}}"
#: GPU time in hours, as gpu-exporter report shows it (Grafana's "h" unit turns 48 into "2 day").
GPU_HOURS = "suffix: GPU-h"
#: Units the dashboards may use (Grafana unit ids, and our custom GPU_HOURS).
UNITS = frozenset(
    {"bytes", "binBps", "percentunit", "celsius", "watt", "hertz", "s", "short", "none",
     "dateTimeAsIso", GPU_HOURS}
)

Step = tuple[str, float | None]
_P = TypeVar("_P", bound="_PanelHead")


class _PanelHead(Protocol):
    """The builder methods every panel kind shares (each returns the builder itself)."""

    def title(self: _P, title: str) -> _P: ...
    def description(self: _P, description: str) -> _P: ...
    def datasource(self: _P, datasource: common_model.DataSourceRef) -> _P: ...
    def unit(self: _P, unit: str) -> _P: ...


_V = TypeVar("_V", bound="_ValuePanel")


class _ValuePanel(_PanelHead, Protocol):
    """The builder methods of the panels that show each series' last value (stat, bar gauge)."""

    def reduce_options(
        self: _V, reduce_options: cogbuilder.Builder[common_model.ReduceDataOptions]
    ) -> _V: ...
    def with_target(self: _V, target: cogbuilder.Builder[cogvariants.Dataquery]) -> _V: ...
    def thresholds(
        self: _V, thresholds: cogbuilder.Builder[dashboard_model.ThresholdsConfig]
    ) -> _V: ...


def _head(panel: _P, title: str, description: str, unit: str) -> _P:
    """Title, description and unit on ``panel``, pointed at the datasource variable."""
    return panel.title(title).description(description).datasource(DATASOURCE).unit(unit)


def board(
    title: str,
    uid: str,
    description: str,
    variables: Sequence[cogbuilder.Builder[dashboard_model.VariableModel]],
    *,
    since: str = "now-6h",
    refresh: str = "30s",
) -> dashboard.Dashboard:
    """A dashboard with the settings all of ours share and ``variables`` in order.

    It covers ``since`` to now, refreshes every ``refresh`` and links cursors across panels.
    """
    built = (
        dashboard.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["gpu", "gpu-exporter"])
        .editable()
        .tooltip(dashboard_model.DashboardCursorSync.CROSSHAIR)
        .time(since, "now")
        .refresh(refresh)
    )
    for variable in variables:
        built = built.with_variable(variable)
    return built


def steps(*pairs: Step) -> dashboard.ThresholdsConfig:
    """Absolute colour thresholds; the first pair's value must be None (the base colour)."""
    return (
        dashboard.ThresholdsConfig()
        .mode(dashboard_model.ThresholdsMode.ABSOLUTE)
        .steps([dashboard_model.Threshold(value=value, color=color) for color, value in pairs])
    )


def _or_plain(thresholds: dashboard.ThresholdsConfig | None) -> dashboard.ThresholdsConfig:
    """``thresholds``, or one green step when there are none (value colouring needs a step)."""
    return thresholds if thresholds is not None else steps(("green", None))


def _last_value(panel: _V, title: str, description: str, unit: str,
                target: prometheus.Dataquery, *,
                thresholds: dashboard.ThresholdsConfig | None) -> _V:
    """``panel`` showing the last value of each series of ``target``, coloured by
    ``thresholds``."""
    return (
        _head(panel, title, description, unit)
        .reduce_options(common_builder.ReduceDataOptions().calcs(["lastNotNull"]))
        .with_target(target)
        .thresholds(_or_plain(thresholds))
    )


def _ref(position: int) -> str:
    """The id of a panel's query at ``position``: A, B, C ..., as Grafana numbers them."""
    return chr(ord("A") + position)


def query(
    expr: str, legend: str = "", *, instant: bool = False, table: bool = False, ref: str = "A"
) -> prometheus.Dataquery:
    """A Prometheus query on the datasource variable; ``table`` ones are instant tables.

    Panels of several queries set each one's ``ref`` by its position.
    """
    q = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DATASOURCE)
    if legend:
        q = q.legend_format(legend)
    if instant or table:
        q = q.instant()
    if table:
        q = q.format(PromQueryFormat.TABLE)
    return q


def sum_by(label: str, expr: str) -> prometheus.Dataquery:
    """``expr`` summed into one series per value of ``label``, each named by its value."""
    return query(f"sum by ({label}) ({expr})", f"{{{{{label}}}}}")


def _legend() -> common_builder.VizLegendOptions:
    return (
        common_builder.VizLegendOptions()
        .show_legend(True)
        .display_mode(common_model.LegendDisplayMode.TABLE)
        .placement(common_model.LegendPlacement.BOTTOM)
        .calcs(["lastNotNull", "max"])
    )


def timeseries_panel(
    title: str,
    description: str,
    unit: str,
    targets: Sequence[prometheus.Dataquery],
    *,
    thresholds: dashboard.ThresholdsConfig | None = None,
    stacked: bool = False,
    min_val: float | None = None,
    max_val: float | None = None,
) -> timeseries.Panel:
    """A time series; with ``thresholds`` the alert thresholds are drawn as dashed lines."""
    panel = (
        _head(timeseries.Panel(), title, description, unit)
        .legend(_legend())
        .tooltip(common_builder.VizTooltipOptions().mode(common_model.TooltipDisplayMode.MULTI).sort(
            common_model.SortOrder.DESCENDING))
        .fill_opacity(30 if stacked else 10)
        .targets([target.ref_id(_ref(i)) for i, target in enumerate(targets)])
    )
    if thresholds is not None:
        panel = panel.thresholds(thresholds).thresholds_style(
            common_builder.GraphThresholdsStyleConfig().mode(common_model.GraphThresholdsStyleMode.DASHED)
        )
    if stacked:
        panel = panel.stacking(
            common_builder.StackingConfig().mode(common_model.StackingMode.NORMAL))
    if min_val is not None:
        panel = panel.min(min_val)
    if max_val is not None:
        panel = panel.max(max_val)
    return panel


def stat_panel(
    title: str,
    description: str,
    unit: str,
    target: prometheus.Dataquery,
    *,
    thresholds: dashboard.ThresholdsConfig | None = None,
) -> stat.Panel:
    """A single big number (the last value), coloured by ``thresholds``."""
    return (
        _last_value(stat.Panel(), title, description, unit, target, thresholds=thresholds)
        .color_mode(common_model.BigValueColorMode.VALUE)
        .graph_mode(common_model.BigValueGraphMode.AREA)
    )


def bar_panel(
    title: str,
    description: str,
    unit: str,
    target: prometheus.Dataquery,
    *,
    thresholds: dashboard.ThresholdsConfig | None = None,
    max_val: float | None = None,
) -> bargauge.Panel:
    """Horizontal bars, one per series (top-N lists; use an instant time-series query)."""
    panel = (
        _last_value(bargauge.Panel(), title, description, unit, target,
                    thresholds=thresholds)
        .orientation(common_model.VizOrientation.HORIZONTAL)
        .display_mode(common_model.BarGaugeDisplayMode.GRADIENT)
        .min(0)
    )
    if max_val is not None:
        panel = panel.max(max_val)
    return panel


@dataclass(frozen=True, slots=True)
class Column:
    """One value column of a table: the instant query and how to show its value."""

    name: str
    expr: str
    unit: str
    thresholds: dashboard.ThresholdsConfig | None = None


def table_panel(
    title: str,
    description: str,
    columns: Sequence[Column],
    *,
    hidden: Sequence[str] = ("Time", "__name__", "job"),
    sort_by: str | None = None,
) -> table.Panel:
    """A table merging instant queries that share labels: one row per label set.

    Each query's value column (``Value #<ref>``) is renamed to its ``Column.name``.
    """
    rename = {f"Value #{_ref(i)}": col.name for i, col in enumerate(columns)}
    if len(columns) == 1:
        rename = {"Value": columns[0].name}
    panel = (
        _head(table.Panel(), title, description, "short")
        .targets([query(col.expr, table=True, ref=_ref(i)) for i, col in enumerate(columns)])
        .with_transformation(dashboard_model.DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(
            dashboard_model.DataTransformerConfig(
                id_val="organize",
                options={"excludeByName": dict.fromkeys(hidden, True), "renameByName": rename},
            )
        )
    )
    for col in columns:
        props = [dashboard_model.DynamicConfigValue(id_val="unit", value=col.unit)]
        if col.thresholds is not None:
            props.append(dashboard_model.DynamicConfigValue(id_val="thresholds",
                                                            value=col.thresholds.build()))
            props.append(
                dashboard_model.DynamicConfigValue(
                    id_val="custom.cellOptions", value={"type": "color-background"}
                )
            )
        panel = panel.override_by_name(col.name, props)
    if sort_by is not None:
        panel = panel.sort_by(
            [common_builder.TableSortByFieldState().display_name(sort_by).desc(True)])
    return panel


@dataclass
class Layout:
    """Places panels left to right on Grafana's 24-column grid, starting a new line when full.

    ``row`` starts a titled row; ids are assigned 1, 2, 3 ... in placement order. The panels of
    a collapsed row sit inside it (Grafana's model) at the places they take once it is
    expanded; Grafana moves the rows below up while it is collapsed.
    """

    board: dashboard.Dashboard
    _x: int = 0
    _y: int = 0
    _line_height: int = 0
    _next_id: int = 1
    _titles: list[str] = field(default_factory=list)
    _collapsed: dashboard_model.RowPanel | None = None

    def _newline(self) -> None:
        self._y += self._line_height
        self._x, self._line_height = 0, 0

    def row(self, title: str, *, collapsed: bool = False) -> Layout:
        """Start a full-width row titled ``title`` below everything placed so far; a
        ``collapsed`` row (for data only some nodes have) holds the panels added after it."""
        self._newline()
        row = (dashboard.Row(title).id(self._take_id())
               .grid_pos(dashboard_model.GridPos(h=1, w=24, x=0, y=self._y))
               .collapsed(collapsed).build())
        self.board.with_row(_BuiltRow(row))
        self._collapsed = row if collapsed else None
        self._y += 1
        return self

    def add(self, panel: cogbuilder.Builder[dashboard_model.Panel], width: int,
            height: int = 8) -> Layout:
        """Place ``panel`` (a panel builder) ``width`` columns wide.

        Raises:
            ValueError: the width is not between 1 and 24.
        """
        if not 1 <= width <= 24:
            raise ValueError(f"panel width {width} outside 1..24")
        if self._x + width > 24:
            self._newline()
        built = panel.build()
        built.id_val = self._take_id()
        built.grid_pos = dashboard_model.GridPos(h=height, w=width, x=self._x, y=self._y)
        if self._collapsed is not None:
            self._collapsed.panels.append(built)
        else:
            self.board.with_panel(_Built(built))
        self._x += width
        self._line_height = max(self._line_height, height)
        return self

    def _take_id(self) -> int:
        value = self._next_id
        self._next_id += 1
        return value


class _Built(cogbuilder.Builder[dashboard_model.Panel]):
    """Hands an already built (and positioned) panel to ``Dashboard.with_panel``."""

    def __init__(self, panel: dashboard_model.Panel) -> None:
        self._panel = panel

    def build(self) -> dashboard_model.Panel:
        return self._panel


class _BuiltRow(cogbuilder.Builder[dashboard_model.RowPanel]):
    """Hands an already built row to ``Dashboard.with_row`` (a collapsed one gets its panels
    later)."""

    def __init__(self, row: dashboard_model.RowPanel) -> None:
        self._row = row

    def build(self) -> dashboard_model.RowPanel:
        return self._row
