"""Generated tables in the docs (written by ``python -m dashboards.generate``): the README's
metric and flag tables, and docs/gpu-activity.md's map of the GPM rows to dcgm-exporter fields.

A table sits between ``<!-- BEGIN <NAME> TABLE ... -->`` and ``<!-- END <NAME> TABLE -->``;
the marker lines stay as they are and everything between them is replaced.
"""

from __future__ import annotations

import re

from exporter.config import flags_markdown_table
from exporter.metrics import markdown_table
from exporter.metrics.activity import dcgm_markdown_table

__all__ = ["DocsError", "render_activity_doc", "render_readme"]


class DocsError(ValueError):
    """A document lacks a BEGIN/END marker pair (or has it twice)."""


def render_readme(text: str) -> str:
    """The README ``text`` with its metric and flag tables replaced by the current ones.

    Raises:
        DocsError: a BEGIN/END marker pair is missing, repeated or out of order.
    """
    return _render(text, {"METRICS": markdown_table(), "FLAGS": flags_markdown_table()})


def render_activity_doc(text: str) -> str:
    """docs/gpu-activity.md ``text`` with its dcgm-exporter map replaced by the current one.

    Raises:
        DocsError: the marker pair is missing, repeated or out of order.
    """
    return _render(text, {"DCGM": dcgm_markdown_table()})


def _render(text: str, tables: dict[str, str]) -> str:
    for marker, table in tables.items():
        pattern = re.compile(
            rf"(^<!-- BEGIN {marker} TABLE[^\n]*-->\n)(.*?)(^<!-- END {marker} TABLE -->$)",
            re.MULTILINE | re.DOTALL,
        )
        matches = pattern.findall(text)
        if len(matches) != 1:
            raise DocsError(
                f"expected one '<!-- BEGIN {marker} TABLE ... -->' ... "
                f"'<!-- END {marker} TABLE -->' pair, found {len(matches)}"
            )
        def replace(match: re.Match[str], table: str = table) -> str:
            return match.group(1) + table + "\n" + match.group(3)

        text = pattern.sub(replace, text)
    return text
