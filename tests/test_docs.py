"""README table rendering: replacement between markers, errors (the generator checks the file)."""

from __future__ import annotations

import pytest

from exporter import metrics
from exporter.config import FLAGS
from exporter.docs import DocsError, render_readme

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


def test_render_fills_both_tables_and_keeps_the_rest() -> None:
    text = render_readme(TEMPLATE)
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
    assert render_readme(text) == text  # idempotent


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
        render_readme(broken)
