"""Generated doc tables: replacement between markers, errors (the generator checks the files)."""

from __future__ import annotations

import pytest

from exporter.catalogue import metrics
from exporter.config import FLAGS, flags_markdown_table
from exporter.docs import DOCS, HEADLINE, DocsError, metrics_table, render_parts

TEMPLATE = """# Title

intro

<!-- BEGIN METRICS TABLE (generated; do not edit) -->
stale metrics
<!-- END METRICS TABLE -->

middle

<!-- BEGIN FLAGS TABLE (generated; do not edit) -->
<!-- END FLAGS TABLE -->
outro
"""


def _render_both(text: str) -> str:
    return render_parts(text, {"METRICS TABLE": metrics_table(),
                               "FLAGS TABLE": flags_markdown_table()})


def test_render_fills_both_tables_and_keeps_the_rest() -> None:
    text = _render_both(TEMPLATE)
    assert "stale metrics" not in text
    for metric in metrics.CATALOGUE:
        assert f"`{metric.name}`" in text
    for flag in FLAGS:
        assert flag.env in text
    for kept in ("# Title", "intro", "middle", "outro", "<!-- END FLAGS TABLE -->"):
        assert kept in text
    assert text.index("gpu_memory_used_bytes") < text.index("middle") < text.index(
        "GPU_EXPORTER_WEB_LISTEN_ADDRESS"
    )
    assert _render_both(text) == text  # idempotent


@pytest.mark.parametrize(
    "broken",
    [
        TEMPLATE.replace("<!-- END METRICS TABLE -->\n", ""),
        TEMPLATE.replace("<!-- BEGIN FLAGS TABLE (generated; do not edit) -->\n", ""),
        TEMPLATE + TEMPLATE,
    ],
)
def test_missing_or_repeated_markers_raise(broken: str) -> None:
    with pytest.raises(DocsError, match="TABLE"):
        _render_both(broken)


def test_the_readme_shows_ten_headline_metrics_and_links_the_full_tables() -> None:
    text = render_parts("<!-- BEGIN HEADLINE TABLE -->\n<!-- END HEADLINE TABLE -->\n",
                        {"HEADLINE TABLE": DOCS["README.md"]()["HEADLINE TABLE"]})
    assert len(HEADLINE) == 10
    assert [line.split("`")[1] for line in text.splitlines()[3:-1]] == [m.name for m in HEADLINE]


def test_the_readme_lists_every_bundled_scenario_with_its_flags() -> None:
    table = DOCS["README.md"]()["SCENARIOS TABLE"]
    from exporter.sources.simulated import list_presets  # noqa: PLC0415

    assert [line.split("`")[1] for line in table.splitlines()[2:]] == list_presets()
    assert "| `slurm-node` |" in table
    assert "`--slurm` `--containers` `--collector.jobstats`" in table
