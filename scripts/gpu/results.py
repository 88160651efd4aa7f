"""The PASS/FAIL lines the GPU checks print, and the results they save (one list a run)."""

from __future__ import annotations

RESULTS: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str = "") -> bool:
    """Record and print one result; ``ok`` again, so a check can guard the next steps."""
    RESULTS.append((name, ok, detail))
    print(f"[{'PASS' if ok else 'FAIL'}] {name}  {detail}", flush=True)
    return ok
