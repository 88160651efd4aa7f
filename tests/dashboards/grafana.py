"""Helpers to walk the committed dashboard JSON: panels, queries, variables."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GRAFANA_DIR = ROOT / "dashboards" / "grafana"
DASHBOARD_FILES = sorted(GRAFANA_DIR.glob("*.json"))
#: Grafana's own variables (replaced by Grafana, not defined in the dashboard).
BUILTIN_VARIABLES = frozenset({"__rate_interval", "__interval", "__range", "__range_s"})
VARIABLE_REF = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")

Json = dict[str, Any]


def load(path: Path) -> Json:
    """One dashboard file."""
    data: Json = json.loads(path.read_text(encoding="utf-8"))
    return data


def panels(board: Json) -> Iterator[Json]:
    """Every panel, including those nested in collapsed rows (rows themselves too)."""
    for panel in board.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def visual_panels(board: Json) -> Iterator[Json]:
    """Panels that show data (not rows)."""
    return (p for p in panels(board) if p["type"] != "row")


def targets(board: Json) -> Iterator[tuple[Json, Json]]:
    """(panel, target) for every query of every panel."""
    for panel in visual_panels(board):
        for target in panel.get("targets", []):
            yield panel, target


def variables(board: Json) -> list[Json]:
    """The dashboard's template variables, in order."""
    listed: list[Json] = board.get("templating", {}).get("list", [])
    return listed


def referenced_variables(text: str) -> set[str]:
    """Names of the ``$var`` / ``${var}`` references in ``text``."""
    return {a or b for a, b in VARIABLE_REF.findall(text)}
