"""``gpu-exporter report``'s cost and honesty on the shared week (tests/report/week.py): cost
per user at each host's price against the ground truth, teams, a job's cost for its summary,
how much of the range has data, and idle stretches that start where the data does."""

from __future__ import annotations

import json
from typing import Any

import pytest

from exporter.catalogue import records
from exporter.report.client import Connection, PrometheusClient
from exporter.report.collect import forgotten_step
from exporter.report.costs import workload_cost
from exporter.report.formats import TITLES
from exporter.report.timerange import TimeRange
from tests.report import scenario
from tests.report.week import (
    CHANGES,
    GPU_HOUR,
    HOSTS,
    KWH_PRICE,
    NEEDS_PROMETHEUS,
    TEAMS,
    Week,
    close,
    report_cli,
    week_report,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240), NEEDS_PROMETHEUS]


def test_cost_per_user_is_the_truth_at_each_hosts_price(week: Week) -> None:
    result = report_cli(week.prometheus.url, "--start", str(week.t0), "--end", str(week.end),
                        "--format", "json")
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    users = {row["labels"]["user"]: row["usage"] for row in doc["users"]}
    totals = doc["totals"]
    # The cost columns: the truth's GPU-seconds at each host's price, its joules per kWh.
    assert doc["currency"] == "EUR"
    for user, want in week.truth.users.items():
        for quantity in ("held", "used", "idle"):
            got, truth = users[user][f"{quantity}_cost"], want[f"{quantity}_gpu_seconds"]
            price = GPU_HOUR[HOSTS[user]] / 3600
            assert close(got, truth * price, price, CHANGES[user]), (user, quantity, got)
        assert close(users[user]["energy_cost"], want["energy_joules"] * KWH_PRICE / 3.6e6,
                      scenario.BUSY_WATTS * KWH_PRICE / 3.6e6, CHANGES[user]), user
    assert totals["total_cost"] == pytest.approx(totals["held_cost"] + totals["energy_cost"])



def test_teams_cost_what_their_members_and_namespaces_cost(week: Week) -> None:
    report = week_report(week, week.t0, week.end)
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
    report = week_report(week, week.t0 - scenario.DAY, week.t0 + 6 * 3600)
    erin = next(p for p in report.processes if p.labels["user"] == "erin")
    assert erin.idle_seconds <= 6 * 3600 + forgotten_step(
        TimeRange(week.t0, week.t0 + 6 * 3600)), erin
    per_user = next(r.usage for r in report.users if r.labels["user"] == "erin")
    # Memory x stretch from the data's start; the user's integral from the process's arrival
    # (half an hour later): within 10 %.
    assert erin.idle_byte_seconds == pytest.approx(per_user.idle_byte_seconds, rel=0.1)
    assert "Xorg" not in {p.labels["process"] for p in report.processes}
    assert "root" in {r.labels["user"] for r in report.users}  # its memory still counts


def test_a_jobs_cost_for_its_summary(week: Week) -> None:
    """workload_cost (what a per-job summary shows) gives the job table's amounts; nothing for
    a job without records."""
    report = week_report(week, week.t0, week.end)
    (job,) = report.jobs
    client = PrometheusClient(Connection(url=week.prometheus.url))
    span = TimeRange(week.t0, week.end)
    got = workload_cost(client, records.JOB, f'{records.JOB_LABEL}="4242"', span)
    assert got is not None
    assert got.currency == "EUR"
    for field, want in (("held", job.usage.held_cost), ("used", job.usage.used_cost),
                        ("idle", job.usage.idle_cost), ("energy", job.usage.energy_cost)):
        # One window over the week versus seven day windows: a sample on a boundary apart.
        assert getattr(got, field) == pytest.approx(want, rel=1e-3), field
    assert got.total == pytest.approx(job.usage.total_cost, rel=1e-3)
    pod = workload_cost(client, records.POD, 'namespace="ml", pod="leaky-0"', span)
    assert pod is not None
    assert pod.held == pytest.approx(report.pods[0].usage.held_cost, rel=1e-3)
    assert workload_cost(client, records.JOB, f'{records.JOB_LABEL}="1"', span) is None
