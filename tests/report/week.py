"""The week the report tests share: a real Prometheus holding a week of two hosts' exporter
data (tests/report/scenario.py), backfilled with its accounting records and a site's cost
records (see backfill.py), and the scenario's ground truth. One per test session
(``tests/report/conftest.py``); the report's tests compare with the truth within the records'
one-minute resolution (``close``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from dashboards import cost, rules
from exporter.catalogue import records, thresholds
from exporter.catalogue.settings import parse
from exporter.report.client import Connection, PrometheusClient
from exporter.report.collect import build_report
from exporter.report.model import GIB, Report
from exporter.report.timerange import TimeRange
from tests.report import scenario
from tests.report.backfill import PROMETHEUS, PROMTOOL, Prometheus, create_blocks

ROOT = Path(__file__).resolve().parents[2]
NEEDS_PROMETHEUS = pytest.mark.skipif(not (PROMETHEUS.exists() and PROMTOOL.exists()),
                                      reason="needs Debian's prometheus package")
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
#: Per user: the largest rate of each quantity (per second) and how many state changes the
#: scenario has for them within the week (starts, ends, busy/idle switches, the restart gap).
RATES = {"idle_gpu_seconds": 1.0, "held_gpu_seconds": 1.0, "used_gpu_seconds": 1.0,
         "idle_byte_seconds": 60 * GIB, "held_byte_seconds": 60 * GIB,
         "energy_joules": scenario.BUSY_WATTS}
CHANGES = {"alice": 2, "bob": 2, "carol": 8, "dave": 20, "erin": 20, "root": 2}


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


def build_week(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Week]:
    """The week's Prometheus, running until the generator is closed."""
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


def week_report(week: Week, start: float, end: float) -> Report:
    client = PrometheusClient(Connection(url=week.prometheus.url))
    return build_report(client, TimeRange(start, end), top=5)


def close(got: float, want: float, per_interval: float, changes: int) -> bool:
    """``got`` within ``changes`` intervals' worth of ``per_interval``, plus 0.5 %."""
    slack = changes * per_interval * records.INTERVAL_SECONDS + 0.005 * abs(want)
    return abs(got - want) <= slack + 1e-9
