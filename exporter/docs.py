"""Generated tables in the docs (written by ``python -m dashboards.generate``): the README's
headline metrics and bundled scenarios, docs/metrics.md's table of every metric, docs/flags.md's
table of every flag, and docs/gpu-activity.md's map of the GPM rows to dcgm-exporter fields.

A generated part sits between ``<!-- BEGIN <NAME> ... -->`` and ``<!-- END <NAME> -->`` (the
names end in ``TABLE``, or ``SECTIONS`` for the runbook's alerts); the marker lines stay as
they are and everything between them is replaced (``render_parts``, which the generator also
uses for dashboards/README.md and the runbook).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from exporter.catalogue.metrics import (
    CATALOGUE,
    GPU_ACTIVITY_ROWS,
    MEMORY_TOTAL,
    MEMORY_USED,
    OPT_IN_GROUPS,
    POWER_USAGE,
    PROCESS_MEMORY,
    SM_ACTIVE,
    TEMPERATURE,
    USER_IDLE_MEMORY,
    USER_MEMORY,
    UTILIZATION,
    XID_ERRORS,
    Metric,
    NvmlGpm,
)
from exporter.config import flags_markdown_table
from exporter.sources.simulated.scenario import list_presets, load_scenario

__all__ = ["DOCS", "DocsError", "render", "render_parts"]

#: The metrics on the README's first screen, in its order (every metric: docs/metrics.md).
HEADLINE: tuple[Metric, ...] = (
    MEMORY_USED, MEMORY_TOTAL, UTILIZATION, SM_ACTIVE, TEMPERATURE, POWER_USAGE, PROCESS_MEMORY,
    USER_MEMORY, USER_IDLE_MEMORY, XID_ERRORS)


class DocsError(ValueError):
    """A document lacks a BEGIN/END marker pair (or has it twice)."""


def metrics_table(rows: tuple[Metric, ...] = CATALOGUE) -> str:
    """The table of ``rows`` (every metric: docs/metrics.md), one row per metric."""
    lines = ["| metric | type | labels | group | meaning |", "|---|---|---|---|---|"]
    for metric in rows:
        labels = ", ".join(f"`{label}`" for label in metric.labels) or "-"
        group = metric.group.value + (" (opt-in)" if metric.group in OPT_IN_GROUPS else "")
        lines.append(
            f"| `{metric.name}` | {metric.kind.value} | {labels} | {group} | {metric.help} |"
        )
    return "\n".join(lines)


def headline_table() -> str:
    """The README's ten headline metrics: name and meaning."""
    lines = ["| metric | meaning |", "|---|---|"]
    lines += [f"| `{metric.name}` | {metric.help} |" for metric in HEADLINE]
    return "\n".join(lines)


def scenarios_table() -> str:
    """The README's table of the bundled scenarios: name, what it shows, the flags it is
    meant to run with (the scenario's ``description`` and ``exporter_flags``)."""
    lines = ["| `--scenario` | what it shows | run it with |", "|---|---|---|"]
    for name in list_presets():
        scenario = load_scenario(name)
        flags = " ".join(f"`{flag}`" for flag in scenario.exporter_flags) or "-"
        lines.append(f"| `{name}` | {scenario.description} | {flags} |")
    return "\n".join(lines)


def dcgm_table() -> str:
    """docs/gpu-activity.md's map: every GPM row, the GPM metric behind it, dcgm-exporter's
    field for the same figure, and the unit change between the two."""
    lines = ["| gpu-exporter series | GPM metric (id) | dcgm-exporter field | unit |",
             "|---|---|---|---|"]
    for row in GPU_ACTIVITY_ROWS:
        spec = row.nvml
        assert isinstance(spec, NvmlGpm)
        unit = ("ratio 0-1 (GPM: percent; dcgm: ratio)" if row.unit == "ratio"
                else "bytes/s (GPM: MiB/s; dcgm: bytes/s)")
        for gpm_field in spec.fields:
            label = row.labels[-1] if gpm_field.label else ""
            series = f"`{row.name}{{{label}=\"{gpm_field.label}\"}}`" if label else f"`{row.name}`"
            dcgm = f"`{gpm_field.dcgm}`" if gpm_field.dcgm else "(none)"
            lines.append(f"| {series} | {gpm_field.metric.name.removeprefix('NVML_GPM_METRIC_')} "
                         f"({gpm_field.metric.value}) | {dcgm} | {unit} |")
    return "\n".join(lines)


#: Each document with generated tables (path from the repository root) -> its tables by marker.
DOCS: dict[str, Callable[[], dict[str, str]]] = {
    "README.md": lambda: {"HEADLINE TABLE": headline_table(),
                          "SCENARIOS TABLE": scenarios_table()},
    "docs/metrics.md": lambda: {"METRICS TABLE": metrics_table()},
    "docs/flags.md": lambda: {"FLAGS TABLE": flags_markdown_table()},
    "docs/gpu-activity.md": lambda: {"DCGM TABLE": dcgm_table()},
}


def render(path: str, text: str) -> str:
    """The document ``path`` (a key of ``DOCS``) as ``text`` with its tables replaced by the
    current ones.

    Raises:
        DocsError: a BEGIN/END marker pair is missing, repeated or out of order.
    """
    return render_parts(text, DOCS[path]())


def render_parts(text: str, parts: dict[str, str]) -> str:
    """``text`` with what stands between the markers of each name in ``parts`` replaced.

    Raises:
        DocsError: a BEGIN/END marker pair is missing, repeated or out of order.
    """
    for marker, table in parts.items():
        pattern = re.compile(
            rf"(^<!-- BEGIN {marker}\b[^\n]*-->\n)(.*?)(^<!-- END {marker} -->$)",
            re.MULTILINE | re.DOTALL,
        )
        matches = pattern.findall(text)
        if len(matches) != 1:
            raise DocsError(
                f"expected one '<!-- BEGIN {marker} ... -->' ... "
                f"'<!-- END {marker} -->' pair, found {len(matches)}"
            )
        def replace(match: re.Match[str], table: str = table) -> str:
            return match.group(1) + table + "\n" + match.group(3)

        text = pattern.sub(replace, text)
    return text
