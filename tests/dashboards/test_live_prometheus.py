"""Dashboards and alerts against a real Prometheus scraping the real simulated exporters.

One exporter per scenario (``python -m exporter --source simulated``), one scrape job with a
``scenario`` target label, plus a target nobody listens on. Prometheus scrapes and evaluates
every second with our rule files loaded. Then:

- every dashboard query, with its variables resolved through Prometheus, is accepted and returns
  data (on the node dashboard: for at least one node);
- every alert expression returns series for the scenario (and GPU) designed to trigger it, and
  none for ``calm``; the recording rules produce series.

Alert ``for`` durations cannot elapse in a short test, so the expressions are evaluated
directly. Expressions are evaluated at a fixed offset after each exporter came up, so the
result does not depend on how fast this machine started the processes.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dashboards import accounting, alerts, owners, recording
from tests.dashboards.grafana import DASHBOARD_FILES, Json, load, targets, variables
from tests.dashboards.live import (
    PROMETHEUS,
    SITE_COST_RULES,
    Stack,
    live_rule_files,
    resolve_variables,
    series_by_scenario,
    substitute,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif(not PROMETHEUS.exists(), reason="needs Debian's prometheus package"),
]

#: Scenario -> simulation speed; faster where the interesting part comes later.
SPEEDS = {
    "calm": 1.0,
    "memory-leak": 4.0,  # the leak grows > 5 % of the total before the OOM at 190 s simulated
    "overheating": 2.0,  # passes 93 degC (hardware slowdown) at 50 s simulated
    "gpu-failure": 2.0,  # ECC errors at 20 s, GPU 3 lost at 30 s simulated
    "shared-workstation": 1.0,
    "input-starved": 1.0,
    "kubernetes-node": 1.0,
    "training-node": 1.0,
    "torch-memory-pressure": 1.0,  # carol's job catches an OOM at 20 s simulated
    "slurm-node": 1.0,
    "xid-storm": 2.0,  # XID 31 every 2 s from 10 s, XID 48/94 at 15/16 s simulated
    "mig-node": 1.0,
    "remap-pending": 2.0,  # remap pending from 20 s, remap failure at 30 s simulated
    "dra-node": 1.0,
}

#: Seconds of real time after an exporter came up at which its alerts are evaluated.
EVAL_AFTER = 40.0

#: The scenarios (and GPUs) designed to fire each alert, and the alerts no scenario can fire,
#: are declared with the alert (``AlertRule.live``); each preset's header comment documents what
#: it is designed to trigger. "down" is the target nobody listens on.
LIVE = {rule.alert: rule.live for rule in alerts.all_alerts()}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The running stack, with every exporter past its evaluation time."""
    tmp: Path = tmp_path_factory.mktemp("live")
    live = Stack(tmp)
    try:
        # Prometheus first: it scrapes each exporter from its first second, so counters are
        # seen at 0 before the events the scenarios inject (an ECC error 10 s in), however
        # slowly this machine starts the processes.
        live.reserve_ports(SPEEDS)
        # A site with prices (the example settings): the efficiency dashboard's cost row too.
        live.start_prometheus(deadline=time.monotonic() + 60, rule_files=live_rule_files(
            tmp, extra=(SITE_COST_RULES,)))
        live.start_exporters(SPEEDS)
        live.wait_exporters(deadline=time.monotonic() + 60)
        rules_loaded = live.api("/api/v1/rules")["data"]["groups"]
        assert len(rules_loaded) == (len(alerts.groups()) + len(recording.groups())
                                     + len(accounting.groups()) + 1)
        end = max(e.ready_at for e in live.exporters.values()) + EVAL_AFTER + 2
        live.wait_scraped_past(end, deadline=time.monotonic() + EVAL_AFTER + 120)
        yield live
    finally:
        live.close()
        shutil.rmtree(tmp / "tsdb", ignore_errors=True)


def _eval_time(stack: Stack, scenario: str) -> float:
    exporter = stack.exporters.get(scenario)
    if exporter is None:  # the dead target: any time after every exporter is up
        return max(e.ready_at for e in stack.exporters.values()) + EVAL_AFTER
    return exporter.ready_at + EVAL_AFTER


def _end(stack: Stack) -> float:
    return max(_eval_time(stack, s) for s in SPEEDS)


def test_every_target_is_scraped_and_the_dead_one_is_down(stack: Stack) -> None:
    active = stack.api("/api/v1/targets")["data"]["activeTargets"]
    health = {t["labels"]["scenario"]: t["health"] for t in active}
    assert health == {**dict.fromkeys(SPEEDS, "up"), "down": "down"}


def _loaded_alerts(stack: Stack) -> dict[str, str]:
    """Alert name -> expression, as Prometheus loaded them from the rule files."""
    groups = stack.api("/api/v1/rules", type="alert")["data"]["groups"]
    return {rule["name"]: rule["query"] for group in groups for rule in group["rules"]}


def test_prometheus_loaded_every_alert(stack: Stack) -> None:
    assert sorted(_loaded_alerts(stack)) == sorted(a.alert for a in alerts.all_alerts())


@pytest.mark.parametrize("alert", [a.alert for a in alerts.all_alerts()])
def test_alert_expression_fires_where_designed_and_never_under_calm(
    stack: Stack, alert: str
) -> None:
    expr = _loaded_alerts(stack)[alert]
    live = LIVE[alert]
    assert live.fires or live.reason, f"{alert}: declare live=fires_under(...) or not_live(...)"
    # calm: silent at every evaluation time (and at the end).
    for at in {_eval_time(stack, s) for s in SPEEDS}:
        answer = stack.query(expr, at)
        assert answer["status"] == "success", answer
        assert "calm" not in series_by_scenario(answer), f"{alert} fires under calm"
        assert "training-node" not in series_by_scenario(answer), f"{alert}: healthy node"
    owner = next(a for a in alerts.all_alerts() if a.alert == alert).audience == "owner"
    for scenario, gpu in live.fires:
        answer = stack.query(expr, _eval_time(stack, scenario))
        found = series_by_scenario(answer)
        assert scenario in found, f"{alert} silent under {scenario}: {found}"
        if owner:  # the label set the expression produces names who to tell
            for series in answer["data"]["result"]:
                labels = series["metric"]
                if labels.get("scenario") == scenario:
                    assert any(labels.get(k) for k in owners.OWNER_LABELS), (alert, labels)
        if gpu is not None:
            assert gpu in found[scenario], f"{alert} not on GPU {gpu}: {found[scenario]}"
            if live.only_that_gpu:
                assert found[scenario] == {gpu}, f"{alert} spills over: {found[scenario]}"


#: Accounting records no live scenario can fill: no simulated process has a batch-job label.
NO_LIVE_DATA = {r.record for r in accounting.all_records() if r.record.startswith("instance_job:")}


def test_recording_rules_produce_series(stack: Stack) -> None:
    empty = []
    for rule in (*recording.all_records(), *alerts.all_records(), *accounting.all_records()):
        if rule.record in NO_LIVE_DATA:
            continue
        answer = stack.query(rule.record, _end(stack))
        assert answer["status"] == "success", answer
        if not answer["data"]["result"]:
            empty.append(rule.record)
    assert empty == []


def _returns_data(stack: Stack, expr: str, target: Json, end: float) -> bool:
    """Run one panel query as Grafana would (instant at ``end``, or range over 40 s).

    Raises:
        AssertionError: Prometheus rejected the query.
    """
    if target.get("instant"):
        answer = stack.query(expr, end)
    else:
        answer = stack.query_range(expr, end - EVAL_AFTER, end)
    assert answer["status"] == "success", f"{expr}\n{answer.get('error')}"
    return bool(answer["data"]["result"])


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=[p.stem for p in DASHBOARD_FILES])
def test_every_panel_query_is_valid_and_returns_data(stack: Stack, path: Path) -> None:
    board = load(path)
    end = _end(stack)
    start = end - EVAL_AFTER
    # Single-select variables (the node on the device dashboard): try every option, as a user
    # would; each panel must show data for at least one of them.
    single = [v for v in variables(board) if v["type"] == "query" and not v.get("multi")]
    picks: list[dict[str, str]] = [{}]
    if single:
        first = resolve_variables(stack, board, start, end)
        options = stack.api("/api/v1/label/hostname/values", start=start, end=end)["data"]
        assert first[single[0]["name"]] in options
        picks = [{single[0]["name"]: option} for option in options]
    with_data: set[tuple[str, str]] = set()
    checked: set[tuple[str, str]] = set()
    for pick in picks:
        values = resolve_variables(stack, board, start, end, pick)
        for panel, target in targets(board):
            key = (panel["title"], target["refId"])
            checked.add(key)
            expr = substitute(target["expr"], values)
            assert "$" not in expr, f"unresolved variable in {expr}"
            if key not in with_data and _returns_data(stack, expr, target, end):
                with_data.add(key)
    assert checked - with_data == set(), "queries without data"
