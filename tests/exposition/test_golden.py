"""The whole exposition against the golden files (tests/golden/<preset>.prom)."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from dashboards.golden import GOLDEN_DIR, OPENMETRICS, golden_body
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


@pytest.mark.parametrize("preset", OPENMETRICS)
def test_openmetrics_exposition_equals_its_golden_file(preset: str) -> None:
    golden = (ROOT / GOLDEN_DIR / f"{preset}.om").read_text(encoding="utf-8")
    body = golden_body(preset, openmetrics=True)
    diff = "".join(difflib.unified_diff(golden.splitlines(True), body.splitlines(True),
                                        "golden", "now", n=1))
    assert body == golden, (f"OpenMetrics /metrics of {preset} changed; if intended, run "
                            f"python -m dashboards.generate and review the diff:\n{diff[:4000]}")


def test_every_counter_series_of_the_openmetrics_goldens_has_its_created_or_a_reason() -> None:
    """Counters say when they started, except the GPU's lifetime counters (no zero known)."""
    lifetime = {row.family_name for row in metrics.CATALOGUE if row.since is metrics.Since.LIFETIME}
    for preset in OPENMETRICS:
        lines = (ROOT / GOLDEN_DIR / f"{preset}.om").read_text().splitlines()
        for position, line in enumerate(lines):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if line.startswith("#") or not name.endswith("_total"):
                continue
            family = name.removesuffix("_total")
            following = lines[position + 1] if position + 1 < len(lines) else ""
            has_created = following.startswith(f"{family}_created")
            assert has_created != (family in lifetime), f"{preset}: {line}"


def test_golden_files_cover_every_scenario_family() -> None:
    exposed = "".join((ROOT / GOLDEN_DIR / f"{p}.prom").read_text() for p in list_presets())
    missing = [row.name for row in metrics.CATALOGUE
               if row.group is not metrics.Group.EXPORTER and f"\n{row.name}" not in exposed
               and not exposed.startswith(row.name)]
    assert missing == []
