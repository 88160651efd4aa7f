"""Structure that keeps rules and dashboards cheap on a large fleet.

Timings are measured by ``bench/fleet.py`` (figures in ``docs/scale.md``); these tests pin the
shape those figures depend on: no rule (alerting, recording or accounting) reads per-process
series, fleet panels read recording rules, and per-process panels are scoped to one node or
capped with ``topk``.
"""

from __future__ import annotations

import re

import pytest

from dashboards import accounting, alerts, recording, rules
from exporter.catalogue import metrics
from exporter.catalogue import records as accounting_records
from tests.dashboards.grafana import GRAFANA_DIR, Json, load, targets, variables

#: Series with one per process (a ``process`` label): the fleet's largest families.
PER_PROCESS = tuple(m.name for m in metrics.PROCESS_ROWS)
RAW = tuple(m.name for m in metrics.CATALOGUE)
RECORDS = {r.record for r in (*recording.all_records(), *alerts.all_records())}


def _reads(expr: str, names: tuple[str, ...]) -> set[str]:
    """The names of ``names`` that ``expr`` selects (not as part of a recording rule name)."""
    return {n for n in names if re.search(rf"(?<![\w:]){n}(?![\w:])", expr)}


def _range_over_process_series(expr: str) -> bool:
    """True when a per-process selector in ``expr`` carries a range (``x{...}[15m]``)."""
    names = "|".join(PER_PROCESS)
    return re.search(rf"(?<![\w:])({names})(\{{[^}}]*\}})?\[", expr) is not None


def test_the_catalogue_has_per_process_metrics() -> None:
    assert "gpu_process_memory_used_bytes" in PER_PROCESS
    assert "gpu_user_memory_used_bytes" not in PER_PROCESS  # per GPU and user


@pytest.mark.parametrize("alert", alerts.all_alerts(), ids=lambda a: a.alert)
def test_no_alert_reads_per_process_series(alert: alerts.AlertRule) -> None:
    """One alert per process would be thousands of alerts (and template expansions) per
    evaluation on a large fleet; alerts read per-user or per-GPU series instead."""
    assert _reads(alert.expr, PER_PROCESS) == set(), alert.alert


@pytest.mark.parametrize("rule", [*recording.all_records(), *alerts.all_records(),
                                  *accounting.all_records()], ids=lambda r: r.record)
def test_no_recording_rule_reads_per_process_series(rule: rules.RecordingRule) -> None:
    """The exporter sums per GPU and user what the rules need (idle memory, busiest process),
    so every rule group costs in proportion to GPUs and users, not processes."""
    assert _reads(rule.expr, PER_PROCESS) == set(), rule.record


def test_windows_in_alert_groups_run_on_per_user_or_per_gpu_series() -> None:
    for rule in (*alerts.all_records(), *alerts.all_alerts()):
        assert not _range_over_process_series(rule.expr)


def _board(name: str) -> Json:
    return load(GRAFANA_DIR / name)


def test_fleet_panels_read_recording_rules_only() -> None:
    """Every fleet overview query reads per-node or per-GPU recording rules (host names too):
    its cost is one series per node (or GPU) per step, whatever runs on the GPUs."""
    for panel, target in targets(_board("gpu-fleet-overview.json")):
        expr = target["expr"]
        assert _reads(expr, RAW) == set(), panel["title"]
        read = set(re.findall(r"\b[a-z_]+:[a-z_0-9:]+", expr))
        assert read, panel["title"]
        assert read <= RECORDS, panel["title"]


def _single_node(board: Json) -> bool:
    node = next((v for v in variables(board) if v["name"] == "node"), None)
    return node is not None and not node.get("multi")


@pytest.mark.parametrize("path", sorted(GRAFANA_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_per_process_panels_are_scoped_to_one_node_or_capped(path: object) -> None:
    """A per-process query either runs on one node's processes (a single-select node
    variable) or is an instant ``topk``: never a window over every process of the fleet."""
    board = load(GRAFANA_DIR / str(getattr(path, "name", path)))
    for panel, target in targets(board):
        expr = target["expr"]
        if not _reads(expr, PER_PROCESS) or _single_node(board):
            continue
        assert target.get("instant"), f"{panel['title']}: per-process range query"
        assert "topk(" in expr, f"{panel['title']}: uncapped per-process table"
        assert not _range_over_process_series(expr), panel["title"]


def test_accounting_reads_one_series_per_user_pod_or_job() -> None:
    """Idle accounting reads the exporter's accounting counters (per user, pod or job on a
    host: their cost grows with users, not processes) and writes nothing per process."""
    counters = {m.name for m in metrics.ACCOUNTING_ROWS}
    for rule in accounting.all_records():
        assert _reads(rule.expr, RAW) <= counters, rule.record
        assert rule.record.startswith(tuple(f"{lv.name}:" for lv in accounting_records.LEVELS))


@pytest.mark.parametrize("name", ["GpuProcessIdle", "GpuUserMemoryIdle"])
def test_idle_alerts_are_one_per_user(name: str) -> None:
    """Idle memory alerts sum every host of a user (promtool tests: idle.test.yaml)."""
    alert = next(a for a in alerts.all_alerts() if a.alert == name)
    assert alert.expr.startswith(f"{alerts.FLEET_USER} ("), alert.expr
