"""``gpu-exporter report`` against a real Prometheus holding a week of data (see backfill.py).

The report's numbers are checked against the scenario's ground truth, integrated in Python on
a 10-second grid (tests/report/scenario.py), not against anything PromQL computed. The
tolerance is the 1-minute resolution of the records: each change of state (a process starting
or stopping, a job going idle, the restart gap) can shift a total by about one interval.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from exporter.catalogue import holders, records, thresholds
from exporter.report.collect import forgotten_step
from exporter.report.formats import csv_text, markdown, text
from exporter.report.html import COLOURS, TOP_USERS, render_html
from exporter.report.model import GIB, HOUR
from exporter.report.timerange import TimeRange
from tests.processes import free_port
from tests.report import scenario
from tests.report.png import colour_counts
from tests.report.week import (
    CHANGES,
    NEEDS_PROMETHEUS,
    QUANTITIES,
    RATES,
    Week,
    close,
    report_cli,
    week_report,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240), NEEDS_PROMETHEUS]


def test_missing_rules_is_one_clear_line(week: Week) -> None:
    result = week.missing_rules
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gpu-exporter report: error: missing recording rules")
    assert records.RULE_FILE in lines[0]


def test_backfill_stays_within_budget(week: Week) -> None:
    # Figures printed by the fixture; the whole module must stay well under a minute here.
    assert sum(week.timings.values()) < 90, week.timings


def test_report_matches_the_scenario(week: Week) -> None:
    result = report_cli(week.prometheus.url, "--start", str(week.t0), "--end", str(week.end),
                        "--format", "json", "--top", "5")
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    assert doc["interval_seconds"] == records.INTERVAL_SECONDS  # read from the loaded group
    users = {row["labels"]["user"]: row["usage"] for row in doc["users"]}
    assert set(users) == set(week.truth.users)
    bad = []
    for user, want in week.truth.users.items():
        for quantity in QUANTITIES:
            got = users[user][quantity]
            if not close(got, want[quantity], RATES[quantity], CHANGES[user]):
                bad.append(f"{user} {quantity}: report {got:.4g} truth {want[quantity]:.4g}")
    assert bad == []
    # Ranked by idle GPU-hours: alice's forgotten notebook first, busy bob last.
    assert next(row["labels"]["user"] for row in doc["users"]) == "alice"
    assert doc["users"][-1]["labels"]["user"] == "bob"
    assert users["bob"]["idle_gpu_seconds"] == 0
    totals = doc["totals"]
    for quantity in QUANTITIES:
        want = sum(u[quantity] for u in week.truth.users.values())
        assert close(totals[quantity], want, RATES[quantity], sum(CHANGES.values())), quantity


def test_pods_and_jobs_match_the_scenario(week: Week) -> None:
    report = week_report(week, week.t0, week.end)
    pods = {(r.labels["namespace"], r.labels["pod"]): r.usage for r in report.pods}
    jobs = {(r.labels[records.JOB_LABEL], r.labels["user"]): r.usage for r in report.jobs}
    assert set(pods) == set(week.truth.pods)
    assert set(jobs) == set(week.truth.jobs)
    for table, truth, changes in ((pods, week.truth.pods, CHANGES["carol"]),
                                  (jobs, week.truth.jobs, CHANGES["dave"])):
        for key, want in truth.items():
            for quantity in QUANTITIES[:5]:
                got = getattr(table[key], quantity)
                assert close(got, want[quantity], RATES[quantity], changes), (key, quantity)
            assert table[key].energy_joules is None  # energy is per user only


def test_forgotten_processes_are_ranked_by_their_longest_idle_stretch(week: Week) -> None:
    report = week_report(week, week.t0, week.end)
    truth = scenario.forgotten(0, scenario.WEEK, thresholds.FORGOTTEN_MIN_IDLE_SECONDS)
    listed = {p.pid for p in scenario.PROCESSES if p.name not in holders.DISPLAY_PROCESSES
              and p.memory(0) >= holders.MIN_FORGOTTEN_BYTES}
    want = sorted(set(truth) & listed, key=lambda pid: -truth[pid]["idle_byte_seconds"])
    assert "601" in truth  # root's Xorg idled all week, and is not listed
    assert [p.labels["pid"] for p in report.processes] == want[:5]
    # The report samples each stretch every forgotten_step seconds, the exporter every scrape.
    slack = forgotten_step(TimeRange(week.t0, week.end)) + scenario.SCRAPE
    for row in report.processes:
        stretch = truth[row.labels["pid"]]
        assert abs(row.idle_seconds - stretch["idle_seconds"]) <= slack, row
        assert abs(row.idle_byte_seconds - stretch["idle_byte_seconds"]) <= (
            slack * row.peak_idle_bytes), row
    # carol's leaking pod idled 4.5 days up to 50 GiB; alice's notebook all week with 30 GiB.
    assert [p.labels["user"] for p in report.processes[:2]] == ["carol", "alice"]
    alice = report.processes[1]
    assert alice.labels["process"] == "jupyter"
    assert alice.peak_idle_bytes == 30 * GIB
    assert alice.started_at == week.t0 + 2 * 3600
    assert alice.running_at_end is True  # still there when the range ends
    assert alice.last_active_at is None  # its kernels were never seen
    dave = next(p for p in report.processes if p.labels["user"] == "dave")
    assert dave.running_at_end is True
    # dave's job computes from midnight: at the week's last instant it has just started again.
    assert dave.last_active_at == week.t0 + scenario.WEEK
    earlier = week_report(week, week.t0, week.end - 3600)
    dave = next(p for p in earlier.processes if p.labels["user"] == "dave")
    # An hour before, it had idled since its 6-hour window of the last day ended.
    assert dave.last_active_at == week.t0 + 6 * scenario.DAY + 6 * 3600 - scenario.SCRAPE
    carol = report.processes[0]
    assert carol.labels["pod"] == "leaky-0"
    assert 45 * GIB < carol.peak_idle_bytes <= 50 * GIB  # the leak, at its largest
    assert carol.running_at_end is False  # ended on day 5
    # bob trained all week: never idle, never listed.
    assert "bob" not in {p.labels["user"] for p in report.processes}


def test_day_boundaries_count_each_sample_once(week: Week) -> None:
    whole = week_report(week, week.t0, week.end)
    split = week.t0 + 3 * scenario.DAY + 1800  # mid-chunk, not on a day boundary
    first, second = week_report(week, week.t0, split), week_report(week, split, week.end)
    for quantity in QUANTITIES[:5]:
        parts = getattr(first.totals, quantity) + getattr(second.totals, quantity)
        assert parts == pytest.approx(getattr(whole.totals, quantity), rel=1e-9), quantity
    assert len(whole.days) == 7
    assert sum(d.usage.idle_gpu_seconds for d in whole.days) == pytest.approx(
        whole.totals.idle_gpu_seconds, rel=1e-9)


def test_text_markdown_and_csv_carry_the_same_numbers(week: Week) -> None:
    report = week_report(week, week.t0, week.end)
    alice = next(r for r in report.users if r.labels["user"] == "alice").usage
    idle_h = f"{alice.idle_gpu_seconds / HOUR:,.1f}"
    table = text(report)
    alice_line = next(line for line in table.splitlines() if " alice " in f" {line} ")
    assert idle_h in alice_line
    assert f"| alice | {idle_h} |" in markdown(report)
    rows = list(csv.DictReader(io.StringIO(csv_text(report))))
    row = next(r for r in rows if r["section"] == "user" and r["user"] == "alice")
    assert float(row["idle_gib_hours"]) == pytest.approx(alice.idle_byte_seconds / GIB / HOUR,
                                                         rel=1e-6)
    assert {r["section"] for r in rows} == {"total", "user", "pod", "job", "team", "process",
                                            "note"}
    assert float(row["held_cost"]) == pytest.approx(alice.held_cost, rel=1e-6)
    assert row["currency"] == "EUR"
    assert f"{alice.held_cost:,.2f}" in alice_line
    assert "held EUR" in table
    assert "total EUR" in table


def test_progress_lines_when_asked(week: Week) -> None:
    result = report_cli(week.prometheus.url, "--since", "3d", "--end", str(week.end),
                        "--progress", "--format", "csv")
    assert result.returncode == 0, result.stderr
    progress = [line for line in result.stderr.splitlines() if line.startswith("querying")]
    assert progress[-1] == "querying Prometheus: 13/13"  # 3 days x 4 levels + processes
    quiet = report_cli(week.prometheus.url, "--since", "1d", "--end", str(week.end))
    assert quiet.returncode == 0
    assert quiet.stderr == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "7d", "--end", "REL:-20"], "empty range: no idle-accounting data"),
        (["--start", "REL:0", "--end", "REL:-1"], "empty range: start"),
        (["--since", "7x"], "is not a duration"),
    ],
)
def test_range_errors_are_one_line(week: Week, args: list[str], message: str) -> None:
    resolved = [str(week.t0 + float(a[4:]) * scenario.DAY) if a.startswith("REL:") else a
                for a in args]
    result = report_cli(week.prometheus.url, *resolved)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert message in lines[0]


def test_unreachable_prometheus_is_one_line() -> None:
    result = report_cli(f"http://127.0.0.1:{free_port()}", "--since", "1d")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "gpu-exporter report: error: cannot reach Prometheus at "
        f"{result.args[5]}: Connection refused")


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu",
                  "--disable-background-networking", "--no-first-run",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/test does)")
def test_html_report_renders_its_charts_in_chromium(week: Week, tmp_path: Path) -> None:
    report = week_report(week, week.t0, week.end)
    page = render_html(report)
    assert "<script" not in page.lower()
    assert re.search(r"""(src|href)=["']?(https?:)?//""", page) is None  # nothing external
    path = tmp_path / "report.html"
    path.write_text(page)
    shot = tmp_path / "report.png"
    assert CHROMIUM is not None
    result = subprocess.run(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
         "--window-size=1200,900", f"--screenshot={shot}", path.as_uri()],
        capture_output=True, text=True, timeout=90, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    counts = colour_counts(shot)
    shown = report.users[:TOP_USERS]
    used = sum(r.usage.used_gpu_seconds for r in shown)
    idle = sum(r.usage.idle_gpu_seconds for r in shown)
    px = {name: counts[colour] for name, colour in COLOURS.items()}
    # Every chart region drew its bars (legend swatches alone are ~150 pixels each).
    assert min(px.values()) > 1000, px
    # The user chart's bars share one scale and one height: idle/used pixel areas follow the
    # data (legend swatches and anti-aliased edges allow some slack).
    assert px["idle"] / px["used"] == pytest.approx(idle / used, rel=0.15), (px, idle / used)


