"""Regenerate the README's metric and flag tables: ``python -m exporter.docs [--check] [FILE]``.

The tables sit between ``<!-- BEGIN METRICS TABLE ... -->`` / ``<!-- END METRICS TABLE -->``
and ``<!-- BEGIN FLAGS TABLE ... -->`` / ``<!-- END FLAGS TABLE -->``; the marker lines stay
as they are and everything between them is replaced. ``--check`` changes nothing and exits 1
when the file is out of date (for CI). Exit 2: the file is unreadable or a marker is missing.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from exporter.config import flags_markdown_table
from exporter.metrics import markdown_table

__all__ = ["DocsError", "main", "render_readme"]

DEFAULT_README = Path(__file__).resolve().parent.parent / "README.md"
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


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite (or with ``--check`` verify) the README; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m exporter.docs", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if FILE is out of date")
    parser.add_argument("file", nargs="?", type=Path, default=DEFAULT_README)
    args = parser.parse_args(argv)
    path: Path = args.file
    try:
        current = path.read_text(encoding="utf-8")
        wanted = render_readme(current)
    except (OSError, UnicodeDecodeError, DocsError) as exc:
        print(f"exporter.docs: error: {path}: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if wanted != current:
            print(f"{path} is out of date: run python -m exporter.docs", file=sys.stderr)
            return 1
        return 0
    if wanted != current:
        path.write_text(wanted, encoding="utf-8")
        print(f"updated {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
