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
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import cost, rules
from exporter.catalogue import holders, records, thresholds
from exporter.catalogue.settings import parse
from exporter.report.client import Connection, PrometheusClient
from exporter.report.collect import build_report, forgotten_step
from exporter.report.formats import TITLES, csv_text, markdown, text
from exporter.report.html import COLOURS, TOP_USERS, render_html
from exporter.report.model import GIB, HOUR, Report
from exporter.report.timerange import TimeRange
from tests.processes import free_port
from tests.report import scenario
from tests.report.backfill import PROMETHEUS, PROMTOOL, Prometheus, create_blocks
from tests.report.png import colour_counts

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif(not (PROMETHEUS.exists() and PROMTOOL.exists()),
                       reason="needs Debian's prometheus package"),
]
ROOT = Path(__file__).resolve().parents[2]
QUANTITIES = ("idle_gpu_seconds", "idle_byte_seconds", "held_gpu_seconds",
              "held_byte_seconds", "used_gpu_seconds", "energy_joules")
#: The site's prices (per GPU-hour by model, per kWh) and teams the cost rules are built from.
GPU_HOUR = {"h1": 2.5, "h2": 1.5}
KWH_PRICE = 0.3
SITE = parse({"cost": {
    "currency": "EUR", "kwhPrice": KWH_PRICE,
    "gpuHourPrices": [{"model": scenario.MODELS[h], "price": p} for h, p in GPU_HOUR.items()],
    "teams": {"users": {"alice": "vision"}, "namespaces": {"ml": "platform"}}}})
HOSTS = {p.user: p.host for p in scenario.PROCESSES}
TEAMS = {"alice": "vision", "carol": "platform"}  # carol's pod runs in namespace ml


@dataclass
class Week:
    prometheus: Prometheus
    t0: float
    truth: scenario.Truth
    missing_rules: subprocess.CompletedProcess[str]
    timings: dict[str, float]

    @property
    def end(self) -> float:
        return self.t0 + scenario.WEEK


def report_cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", "report", "--prometheus.url", url, *args],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Week]:
    assert thresholds.IDLE_UTILIZATION_RATIO == scenario.IDLE_RATIO
    tmp = tmp_path_factory.mktemp("week")
    timings: dict[str, float] = {}
    clock = time.monotonic()
    # The week ends two days ago, starting on a 2-hour block boundary.
    t0 = float(int(time.time() - 9 * scenario.DAY) // 7200 * 7200)
    files = []
    for day in range(8):
        path = tmp / f"raw-{day}.om"
        begin = day * scenario.DAY
        with path.open("w") as out:
            out.writelines(scenario.openmetrics(t0, begin, min(begin + scenario.DAY,
                                                               scenario.WEEK + 1)))
        files.append(path)
    timings["generate"] = time.monotonic() - clock
    prom = Prometheus(tmp)
    create_blocks(files, prom.tsdb)
    timings["backfill raw"] = time.monotonic() - clock - timings["generate"]
    try:
        prom.start()
        missing = report_cli(prom.url, "--start", str(t0), "--end", str(t0 + scenario.WEEK))
        mark = time.monotonic()
        rule_file = tmp / records.RULE_FILE
        accounting = yaml.safe_load((ROOT / "dashboards" / "rules" / records.RULE_FILE)
                                    .read_text())["groups"]
        priced = yaml.safe_load(rules.render(cost.groups(SITE), "cost.py"))["groups"]
        rule_file.write_text(yaml.safe_dump({"groups": accounting + priced}))
        # Evaluations half an interval after each scrape, as a live group would run; the cost
        # group reads the accounting records, so it runs once they are in.
        for group in (accounting[0], priced[0]):
            prom.evaluate_rules(group["rules"], t0 + 30, t0 + scenario.WEEK,
                                records.INTERVAL_SECONDS, tmp)
        prom.rule_file = rule_file
        prom.start()
        timings["evaluate and backfill rules"] = time.monotonic() - mark
        mark = time.monotonic()
        truth = scenario.truth(0, scenario.WEEK, step=20.0)
        timings["ground truth"] = time.monotonic() - mark
        print("\nbackfill timings (s):", {k: round(v, 1) for k, v in timings.items()})
        yield Week(prom, t0, truth, missing, timings)
    finally:
        prom.stop()


def _report(week: Week, start: float, end: float) -> Report:
    client = PrometheusClient(Connection(url=week.prometheus.url))
    return build_report(client, TimeRange(start, end), top=5)


def _close(got: float, want: float, per_interval: float, changes: int) -> bool:
    """``got`` within ``changes`` intervals' worth of ``per_interval``, plus 0.5 %."""
    slack = changes * per_interval * records.INTERVAL_SECONDS + 0.005 * abs(want)
    return abs(got - want) <= slack + 1e-9


#: Per user: the largest rate of each quantity (per second) and how many state changes the
#: scenario has for them within the week (starts, ends, busy/idle switches, the restart gap).
RATES = {"idle_gpu_seconds": 1.0, "held_gpu_seconds": 1.0, "used_gpu_seconds": 1.0,
         "idle_byte_seconds": 60 * GIB, "held_byte_seconds": 60 * GIB,
         "energy_joules": scenario.BUSY_WATTS}
CHANGES = {"alice": 2, "bob": 2, "carol": 8, "dave": 20, "erin": 20, "root": 2}


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
            if not _close(got, want[quantity], RATES[quantity], CHANGES[user]):
                bad.append(f"{user} {quantity}: report {got:.4g} truth {want[quantity]:.4g}")
    assert bad == []
    # Ranked by idle GPU-hours: alice's forgotten notebook first, busy bob last.
    assert next(row["labels"]["user"] for row in doc["users"]) == "alice"
    assert doc["users"][-1]["labels"]["user"] == "bob"
    assert users["bob"]["idle_gpu_seconds"] == 0
    totals = doc["totals"]
    for quantity in QUANTITIES:
        want = sum(u[quantity] for u in week.truth.users.values())
        assert _close(totals[quantity], want, RATES[quantity], sum(CHANGES.values())), quantity
    # The cost columns: the truth's GPU-seconds at each host's price, its joules per kWh.
    assert doc["currency"] == "EUR"
    for user, want in week.truth.users.items():
        for quantity in ("held", "used", "idle"):
            got, truth = users[user][f"{quantity}_cost"], want[f"{quantity}_gpu_seconds"]
            price = GPU_HOUR[HOSTS[user]] / 3600
            assert _close(got, truth * price, price, CHANGES[user]), (user, quantity, got)
        assert _close(users[user]["energy_cost"], want["energy_joules"] * KWH_PRICE / 3.6e6,
                      scenario.BUSY_WATTS * KWH_PRICE / 3.6e6, CHANGES[user]), user
    assert totals["total_cost"] == pytest.approx(totals["held_cost"] + totals["energy_cost"])


def test_pods_and_jobs_match_the_scenario(week: Week) -> None:
    report = _report(week, week.t0, week.end)
    pods = {(r.labels["namespace"], r.labels["pod"]): r.usage for r in report.pods}
    jobs = {(r.labels[records.JOB_LABEL], r.labels["user"]): r.usage for r in report.jobs}
    assert set(pods) == set(week.truth.pods)
    assert set(jobs) == set(week.truth.jobs)
    for table, truth, changes in ((pods, week.truth.pods, CHANGES["carol"]),
                                  (jobs, week.truth.jobs, CHANGES["dave"])):
        for key, want in truth.items():
            for quantity in QUANTITIES[:5]:
                got = getattr(table[key], quantity)
                assert _close(got, want[quantity], RATES[quantity], changes), (key, quantity)
            assert table[key].energy_joules is None  # energy is per user only


def test_forgotten_processes_are_ranked_by_their_longest_idle_stretch(week: Week) -> None:
    report = _report(week, week.t0, week.end)
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
    earlier = _report(week, week.t0, week.end - 3600)
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
    whole = _report(week, week.t0, week.end)
    split = week.t0 + 3 * scenario.DAY + 1800  # mid-chunk, not on a day boundary
    first, second = _report(week, week.t0, split), _report(week, split, week.end)
    for quantity in QUANTITIES[:5]:
        parts = getattr(first.totals, quantity) + getattr(second.totals, quantity)
        assert parts == pytest.approx(getattr(whole.totals, quantity), rel=1e-9), quantity
    assert len(whole.days) == 7
    assert sum(d.usage.idle_gpu_seconds for d in whole.days) == pytest.approx(
        whole.totals.idle_gpu_seconds, rel=1e-9)


def test_text_markdown_and_csv_carry_the_same_numbers(week: Week) -> None:
    report = _report(week, week.t0, week.end)
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
    report = _report(week, week.t0, week.end)
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


def test_teams_cost_what_their_members_and_namespaces_cost(week: Week) -> None:
    report = _report(week, week.t0, week.end)
    teams = {row.labels["team"]: row.usage for row in report.teams}
    users = {row.labels["user"]: row.usage for row in report.users}
    assert set(teams) == {"vision", "platform", records.UNASSIGNED_TEAM}
    members: dict[str, list[str]] = {}
    for user in users:
        members.setdefault(TEAMS.get(user, records.UNASSIGNED_TEAM), []).append(user)
    for team, names in members.items():
        for field in ("held_cost", "idle_cost", "energy_cost"):
            want = sum(getattr(users[name], field) or 0.0 for name in names)
            # Both are sums of the same per-minute records, priced the same way.
            assert getattr(teams[team], field) == pytest.approx(want, rel=1e-6, abs=1e-9), (
                team, field)


def test_a_short_history_says_how_much_data_there_is(week: Week) -> None:
    """Eleven minutes of data in a two-day range: the header says so, and why no process is
    listed (none could idle 15 minutes)."""
    end = week.t0 + 11 * 60
    result = report_cli(week.prometheus.url, "--start", str(week.t0 - 2 * scenario.DAY),
                        "--end", str(end))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].endswith("(2d11m requested)")
    assert lines[1].startswith("Data: 11m of the 2d11m range (0%), from ")
    empty = lines.index(TITLES["processes"])
    assert lines[empty + 1] == ("  none: the range holds 11m of data, less than the 15m a "
                                "process must idle to be listed")
    doc = json.loads(report_cli(week.prometheus.url, "--start", str(week.t0 - 2 * scenario.DAY),
                                "--end", str(end), "--format", "json").stdout)
    assert doc["coverage"]["seconds"] == 11 * 60
    assert doc["coverage"]["first"] == week.t0
    assert "processes" in doc["why_empty"]


def test_idle_stretches_start_where_the_data_does(week: Week) -> None:
    """erin's process started three days before the exporter saw it: in a range starting a
    day before the data, its stretch counts from the data's start, as her per-user figure
    does, not from its start."""
    report = _report(week, week.t0 - scenario.DAY, week.t0 + 6 * 3600)
    erin = next(p for p in report.processes if p.labels["user"] == "erin")
    assert erin.idle_seconds <= 6 * 3600 + forgotten_step(
        TimeRange(week.t0, week.t0 + 6 * 3600)), erin
    per_user = next(r.usage for r in report.users if r.labels["user"] == "erin")
    # Memory x stretch from the data's start; the user's integral from the process's arrival
    # (half an hour later): within 10 %.
    assert erin.idle_byte_seconds == pytest.approx(per_user.idle_byte_seconds, rel=0.1)
    assert "Xorg" not in {p.labels["process"] for p in report.processes}
    assert "root" in {r.labels["user"] for r in report.users}  # its memory still counts
