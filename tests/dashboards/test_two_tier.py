"""The rules and dashboards on a central store fed by remote write, as in a two-tier fleet.

Simulated exporters of several scenarios (processes and users, Kubernetes pods, Slurm jobs,
MIG, XIDs, PyTorch's allocator, row remapping), one Prometheus in agent mode scraping them
every second and remote-writing everything to a central Prometheus (its remote-write
receiver, every rule file loaded) and to a VictoriaMetrics single-node (rules evaluated by
vmalert, which writes its records and alert state back). The components and configurations
are those of ``bench/fleet_two_tier.py``, with VictoriaMetrics' and vmalert's delays before
data is visible cut to a second so the test stays short. Then, on each central store:

- every rule evaluates without error, and the recording rules produce series;
- every dashboard query, with its variables resolved as Grafana resolves them against that
  store, is accepted, and the dashboards show data;
- a query or record has data on VictoriaMetrics exactly where it has data on Prometheus.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from bench.fleet import QueryTiming, dashboard_queries, time_query
from bench.fleet_two_tier import (
    VICTORIA_METRICS,
    VMALERT,
    Central,
    Launcher,
    alert_sink,
    rule_state,
)
from tests.dashboards.grafana import DASHBOARD_FILES, GRAFANA_DIR
from tests.dashboards.live import (
    PROMETHEUS,
    RULE_FILES,
    SITE_COST_RULES,
    Stack,
    live_rule_files,
)
from tests.processes import stop_all

ROOT = Path(__file__).resolve().parents[2]

HAVE_VICTORIA = VICTORIA_METRICS.exists() and VMALERT.exists()
NEEDS_VICTORIA = pytest.mark.skipif(
    not HAVE_VICTORIA, reason="needs Debian's victoria-metrics package (scripts/test installs it)")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif(not PROMETHEUS.exists(), reason="needs Debian's prometheus package"),
]

#: Scenario -> simulation speed: one node each, together showing data on every dashboard.
SCENARIOS = {"shared-workstation": 1.0, "kubernetes-node": 1.0, "slurm-node": 1.0,
             "mig-node": 1.0, "xid-storm": 2.0, "torch-memory-pressure": 1.0,
             "remap-pending": 2.0}
NODES = len(SCENARIOS)
NODE_BOARDS = [GRAFANA_DIR / "gpu-node-device.json"]
INTERVAL = 1.0
#: Every recording rule's name, from the rule files the stores load (a site's cost group too).
RECORDS = frozenset(rule["record"] for path in (*RULE_FILES, SITE_COST_RULES)
                    for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
                    for rule in group["rules"] if "record" in rule)
#: Seconds after the agent starts by which every record with data has it (rates over two
#: samples, records of records, vmalert's write-back and VictoriaMetrics' delay included).
SETTLE = 40.0


def _recorded(central: Central) -> set[str]:
    """The records holding series on ``central``'s store now."""
    answer = central.store.api("/api/v1/query", query="count by (__name__) "
                               f'({{__name__=~"{"|".join(sorted(RECORDS))}"}})')
    return {series["metric"]["__name__"] for series in answer["data"]["result"]}


@dataclass
class Setup:
    """The central stores and when their data starts."""

    centrals: dict[str, Central]
    data_start: float


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("two-tier")
    deadline = time.monotonic() + 150
    rules = [Path(p) for p in live_rule_files(tmp, extra=(SITE_COST_RULES,))]
    launcher = Launcher(tmp, deadline, rules, INTERVAL,
                        victoria_flags=("-search.latencyOffset=1s",),
                        vmalert_flags=("-remoteWrite.flushInterval=1s",))
    kinds = ["prometheus", *(["victoriametrics"] if HAVE_VICTORIA else [])]
    exporters = Stack(tmp)
    try:
        with alert_sink() as notifier:
            exporters.start_exporters(SCENARIOS)
            centrals = {kind: launcher.central(kind, NODES, notifier) for kind in kinds}
            exporters.wait_exporters(deadline)
            started = time.time()
            launcher.agent("rack-a", [f"127.0.0.1:{e.port}" for e in exporters.exporters.values()],
                           [c.write_url for c in centrals.values()])
            # Until every record has series on every store, or SETTLE has passed.
            while any(_recorded(c) != RECORDS for c in centrals.values()):
                if time.time() > started + SETTLE:
                    break
                time.sleep(1)
            yield Setup(centrals, started)
    finally:
        stop_all(reversed(launcher.processes), timeout=10)
        exporters.close()


def _central(setup: Setup, kind: str) -> Central:
    if kind not in setup.centrals:
        pytest.skip(f"{kind} is not installed")
    return setup.centrals[kind]


KINDS = [pytest.param("prometheus"),
         pytest.param("victoriametrics", marks=NEEDS_VICTORIA)]


@pytest.mark.parametrize("kind", KINDS)
def test_every_rule_evaluates_and_the_records_hold_series(setup: Setup, kind: str) -> None:
    state = rule_state(_central(setup, kind))
    assert state.rules > 50
    assert state.failing == {}
    # Records of cases none of these scenarios has may stay empty; nearly all hold series.
    recorded = {name for name, count in state.series.items() if count and name in RECORDS}
    assert len(recorded) >= 0.9 * len(RECORDS), sorted(RECORDS - recorded)


def _queries(setup: Setup, kind: str) -> list[QueryTiming]:
    """Every panel query, the node dashboard's once per node."""
    central = _central(setup, kind)
    end = time.time()
    queries = dashboard_queries(central.store.port, DASHBOARD_FILES, setup.data_start, end,
                                INTERVAL)
    hosts = central.store.api("/api/v1/label/hostname/values")["data"]
    for host in sorted(hosts)[1:]:
        queries += dashboard_queries(central.store.port, NODE_BOARDS, setup.data_start, end,
                                     INTERVAL, pick={"node": host})
    for query in queries:
        time_query(central.store, query, end, INTERVAL, timeout=30)  # raises when rejected
    return queries


@pytest.mark.parametrize("kind", KINDS)
def test_every_dashboard_query_is_accepted_and_the_dashboards_show_data(
        setup: Setup, kind: str) -> None:
    queries = _queries(setup, kind)
    assert all(q.seconds and not q.timed_out for q in queries)
    panels = {(q.dashboard, q.panel, q.ref) for q in queries}
    shown = {(q.dashboard, q.panel, q.ref) for q in queries if q.series}
    assert {board for board, _, _ in shown} == {path.stem for path in DASHBOARD_FILES}
    # Panels of cases no scenario has here (collection errors) may stay empty.
    assert len(shown) >= 0.9 * len(panels), sorted(panels - shown)


@NEEDS_VICTORIA
def test_victoriametrics_has_data_where_prometheus_has(setup: Setup) -> None:
    # Both stores receive the same samples; a query that is empty on one only may be racing
    # the latest data, so it is asked again (a loaded machine: for a while) before it counts.
    def differing() -> list[str]:
        pairs = zip(_queries(setup, "prometheus"), _queries(setup, "victoriametrics"),
                    strict=True)
        return [f"{a.dashboard} / {a.panel} [{a.ref}]: {a.series} against {b.series} series"
                for a, b in pairs if (a.series > 0) != (b.series > 0)]

    deadline = time.monotonic() + 30
    while (found := differing()) and time.monotonic() < deadline:
        time.sleep(1)
    assert found == []
    recorded = [{name for name, count in rule_state(setup.centrals[kind]).series.items()
                 if count and name in RECORDS} for kind in ("prometheus", "victoriametrics")]
    assert recorded[0] == recorded[1]
