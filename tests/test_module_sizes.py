"""docs/architecture.md names every module over 400 lines with its one concern, and no other."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 400


def long_modules() -> set[str]:
    """The tracked Python files over ``LIMIT`` lines (as ``wc -l`` counts them)."""
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True,
                            text=True, check=True, timeout=60).stdout.split()
    return {path for path in listed
            if (ROOT / path).read_bytes().count(b"\n") > LIMIT}


def named_modules() -> set[str]:
    """The modules the architecture page's table names, each with a line count and a concern."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Modules over 400 lines", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([^`]+)` \| \d+ \| \S.* \|$", section, re.MULTILINE))


def test_every_module_over_400_lines_is_named_with_its_concern() -> None:
    long, named = long_modules(), named_modules()
    assert long, "no module over the limit: the git listing is wrong"
    assert not long - named, f"add to docs/architecture.md, with its concern: {long - named}"
    assert not named - long, f"no longer over {LIMIT} lines: {named - long}"
