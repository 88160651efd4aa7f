"""The XID table: complete for the codes operators meet, and the runbook shows it verbatim."""

from __future__ import annotations

import re
from pathlib import Path

from dashboards import xids

RUNBOOK = Path(__file__).resolve().parents[2] / "dashboards" / "runbooks" / "gpu-exporter-alerts.md"
#: The codes the issue (and operators) ask about, each of which needs a row.
COMMON = (13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120)


def test_every_common_code_is_explained_once() -> None:
    assert set(COMMON) <= set(xids.BY_CODE)
    assert len(xids.BY_CODE) == len(xids.XIDS)
    for xid in xids.XIDS:
        assert xid.meaning.endswith(".")
        assert xid.action


def test_classes_drive_the_alert_regexes() -> None:
    assert xids.codes(xids.XidClass.APPLICATION)[:3] == (13, 31, 43)
    hardware = xids.codes(xids.XidClass.HARDWARE)
    assert {48, 64, 74, 79, 94, 95, 119, 120} <= set(hardware)
    assert not set(hardware) & set(xids.codes(xids.XidClass.APPLICATION))
    assert re.fullmatch(xids.regex(xids.XidClass.HARDWARE), "79")
    assert not re.fullmatch(xids.regex(xids.XidClass.HARDWARE), "7")
    assert not re.fullmatch(xids.regex(xids.XidClass.APPLICATION), "131")


def test_runbook_carries_the_generated_table() -> None:
    text = RUNBOOK.read_text()
    assert xids.markdown_table() in text, "stale XID table: run python -m dashboards.generate"
