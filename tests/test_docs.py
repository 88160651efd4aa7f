"""README table generation: replacement between markers, --check, errors, the real README."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter import metrics as cat
from exporter.config import FLAGS
from exporter.docs import DEFAULT_README, DocsError, main, render_readme

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
    for metric in cat.CATALOGUE:
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


def test_main_check_and_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(TEMPLATE, encoding="utf-8")
    assert main(["--check", str(readme)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert readme.read_text(encoding="utf-8") == TEMPLATE  # --check writes nothing
    assert main([str(readme)]) == 0
    assert main(["--check", str(readme)]) == 0
    assert "gpu_memory_used_bytes" in readme.read_text(encoding="utf-8")


def test_main_reports_unusable_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "missing.md")]) == 2
    no_markers = tmp_path / "plain.md"
    no_markers.write_text("# nothing here\n", encoding="utf-8")
    assert main(["--check", str(no_markers)]) == 2
    assert "BEGIN METRICS TABLE" in capsys.readouterr().err


def test_repository_readme_is_current() -> None:
    text = DEFAULT_README.read_text(encoding="utf-8")
    assert render_readme(text) == text, "README tables are stale: run python -m exporter.docs"
