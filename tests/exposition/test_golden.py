"""The whole exposition against the golden files (tests/golden/<preset>.prom)."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from dashboards.golden import GOLDEN_DIR, golden_body
from exporter.catalogue import metrics
from exporter.sources.simulated.scenario import list_presets

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("preset", list_presets())
def test_exposition_equals_the_golden_file(preset: str) -> None:
    golden = (ROOT / GOLDEN_DIR / f"{preset}.prom").read_text(encoding="utf-8")
    body = golden_body(preset)
    diff = "".join(difflib.unified_diff(golden.splitlines(True), body.splitlines(True),
                                        "golden", "now", n=1))
    assert body == golden, (f"/metrics of {preset} changed; if intended, run "
                            f"python -m dashboards.generate and review the diff:\n{diff[:4000]}")


def test_golden_files_cover_every_scenario_family() -> None:
    exposed = "".join((ROOT / GOLDEN_DIR / f"{p}.prom").read_text() for p in list_presets())
    missing = [row.name for row in metrics.CATALOGUE
               if row.group is not metrics.Group.EXPORTER and f"\n{row.name}" not in exposed
               and not exposed.startswith(row.name)]
    assert missing == []
