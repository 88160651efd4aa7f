"""The efficiency dashboard's cost row: what GPU time and energy cost over the range, by team
and by user, and who held GPUs idle at the highest cost.

The panels read the cost records (``dashboards/cost.py``), which exist only where the site set
prices; without them the row stays collapsed and its panels show no data, never a zero. The
unit is the prices' currency (``dashboards.settings.current``; the Helm chart's copy fills it
in from its values).
"""

from __future__ import annotations

from dashboards import panels, settings, variables
from dashboards.promql import sel_record
from exporter.catalogue import records

__all__ = ["CURRENCY_UNIT_PREFIX", "add_row", "currency_unit"]

#: A cost's unit: its currency after the number, as the report prints it ("12.50 EUR").
CURRENCY_UNIT_PREFIX = "suffix: "
_RANGE = "[$__range]"
#: Per-minute cost rates -> the range's amount.
_AMOUNT = f" * {records.INTERVAL_SECONDS}"
TOP_IDLE = 10
ABOUT = (
    "From the cost recording rules (gpu-exporter-cost, present only with prices: docs/cost.md): "
    "the idle-accounting records priced at each host's price per GPU-hour (by GPU model) and "
    "the price per kWh. Held includes used and idle; total = held + energy."
)


def currency_unit() -> str:
    """The unit of an amount: the currency in force ("short" without prices; the chart's
    placeholder while its copy is built, which its template fills in the same way)."""
    prices = settings.current().prices
    if prices is None:
        return "short"
    if settings.is_placeholder(prices.currency):
        return settings.token("currencyUnit")
    return CURRENCY_UNIT_PREFIX + prices.currency


def _amount(level: records.Level, quantity: str, matchers: str, by: str) -> str:
    inner = f"sum_over_time({sel_record(level.record(quantity), matchers)}{_RANGE})"
    summed = f"sum by ({by}) ({inner})" if by else f"sum({inner})"
    return summed + _AMOUNT


_COLUMNS = (("Held", records.HELD_COST), ("Used", records.USED_COST),
            ("Idle", records.IDLE_COST), ("Energy", records.ENERGY_COST))


def _table(grid: panels.Layout, title: str, level: records.Level, matchers: str, *, by: str,
           unit: str) -> None:
    columns = [panels.Column(name, _amount(level, quantity, matchers, by), unit)
               for name, quantity in _COLUMNS]
    grid.add(panels.table_panel(
        title, f"What each {by} held, used, held idle and drew over the range. "
        + ABOUT, columns, sort_by=columns[0].name), 12, 8)


def add_row(grid: panels.Layout) -> None:
    """The cost row, at the end of the efficiency dashboard."""
    prices = settings.current().prices
    unit = currency_unit()
    collapsed = prices is None or settings.is_placeholder(prices.currency)
    grid.row("What it costs (with prices: docs/cost.md)", collapsed=collapsed)
    user = records.USER
    for title, quantity, text in (
        ("Held", records.HELD_COST, "GPU time held, at each host's price per GPU-hour."),
        ("Used", records.USED_COST, "GPU time the kernels ran (SM utilisation)."),
        ("Held idle", records.IDLE_COST, "GPU time held while the GPU idled: paid, unused."),
        ("Energy", records.ENERGY_COST, "Attributed energy at the price per kWh."),
    ):
        grid.add(panels.stat_panel(f"Cost: {title.lower()}", f"{text} {ABOUT}", unit,
                                   panels.query(_amount(user, quantity, variables.HOST_USER,
                                                        ""))), 6, 4)
    _table(grid, "Cost by team", records.TEAM, variables.HOST, by=records.TEAM_LABEL, unit=unit)
    _table(grid, "Cost by user", user, variables.HOST_USER, by="user", unit=unit)
    idle = _amount(user, records.IDLE_COST, variables.HOST_USER, "user")
    grid.add(panels.bar_panel(
        "Idle cost, ranked", f"The {TOP_IDLE} users whose idle holds cost the most over the "
        f"range. {ABOUT}", unit, panels.query(f"topk({TOP_IDLE}, {idle})", "{{user}}",
                                             instant=True)), 24, 8)
