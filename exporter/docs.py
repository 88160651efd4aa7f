"""The README's generated metric and flag tables (written by ``python -m dashboards.generate``).

The tables sit between ``<!-- BEGIN METRICS TABLE ... -->`` / ``<!-- END METRICS TABLE -->``
and ``<!-- BEGIN FLAGS TABLE ... -->`` / ``<!-- END FLAGS TABLE -->``; the marker lines stay
as they are and everything between them is replaced.
"""

from __future__ import annotations

import re

from exporter.config import flags_markdown_table
from exporter.metrics import markdown_table

__all__ = ["DocsError", "render_readme"]

SECTIONS: tuple[tuple[str, str], ...] = (("METRICS", "metrics"), ("FLAGS", "flags"))


class DocsError(ValueError):
    """The README lacks a BEGIN/END marker pair (or has it twice)."""


def _tables() -> dict[str, str]:
    return {"metrics": markdown_table(), "flags": flags_markdown_table()}


def render_readme(text: str) -> str:
    """``text`` with every generated table replaced by the current one.

    Raises:
        DocsError: a BEGIN/END marker pair is missing, repeated or out of order.
    """
    tables = _tables()
    for marker, key in SECTIONS:
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
        table = tables[key]

        def replace(match: re.Match[str], table: str = table) -> str:
            return match.group(1) + table + "\n" + match.group(3)

        text = pattern.sub(replace, text)
    return text
