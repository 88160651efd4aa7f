"""The PASS/FAIL/SKIP lines the GPU checks print, and the results they save (one list a run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: (check, True/False, or None when skipped, detail)
RESULTS: list[tuple[str, bool | None, str]] = []


def _verdict(ok: bool | None) -> str:
    return "SKIP" if ok is None else ("PASS" if ok else "FAIL")


def check(name: str, ok: bool | None, detail: str = "") -> bool:
    """Record and print one result (``ok=None``: skipped); whether it passed, so a check can
    guard the next steps."""
    RESULTS.append((name, ok, detail))
    print(f"[{_verdict(ok)}] {name}  {detail}", flush=True)
    return bool(ok)


def print_table() -> bool:
    """Every result again, aligned, and the counts; whether none failed."""
    width = max((len(name) for name, _, _ in RESULTS), default=10)
    print("\n" + "=" * (width + 8))
    for name, ok, detail in RESULTS:
        print(f"{_verdict(ok)}  {name.ljust(width)}  {detail}")
    failed = sum(ok is False for _, ok, _ in RESULTS)
    skipped = sum(ok is None for _, ok, _ in RESULTS)
    print(f"{len(RESULTS) - failed - skipped}/{len(RESULTS)} checks passed, {failed} failed, "
          f"{skipped} skipped")
    return not failed


def save(result: dict[str, Any], out: Path | None) -> bool:
    """Print the table, then write ``result`` with every check to ``out`` (JSON) if given;
    whether none failed."""
    passed = print_table()
    result["checks"] = RESULTS
    if out:
        out.write_text(json.dumps(result, indent=1, default=str))
    return passed
