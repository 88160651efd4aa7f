"""Two-tier fleet benchmark: simulated GPU nodes scraped by Prometheus agents that remote-write
to central stores, where every rule and every dashboard query of the repo runs.

Usage (from the repository root; needs Debian's ``prometheus`` and ``victoria-metrics``
packages, which this script never installs)::

    .venv/bin/python bench/fleet_two_tier.py --nodes 24 --lock /work/coord/bench.lock

What runs, all on 127.0.0.1 and stopped at the end:

- ``--nodes`` N live ``gpu-exporter --source simulated --scenario synthetic:8x32`` processes
  (the same nodes as ``bench/fleet.py --live``);
- two Prometheus servers in agent mode, ``rack-a`` scraping the first half of the nodes and
  ``rack-b`` the second, every ``--interval`` seconds, each remote-writing what it scrapes;
- central stores, each with every rule file of ``dashboards/rules/``: a Prometheus with its
  remote-write receiver (rules evaluated by that Prometheus) and a VictoriaMetrics single-node
  (rules evaluated by vmalert, which reads through VictoriaMetrics' Prometheus-compatible query
  API and writes recorded series and ``ALERTS`` back through remote write). Each kind runs
  twice: one store receives both agents (N nodes), the other ``rack-a`` only (N/2 nodes), so
  one run compares every query on a fleet and on that fleet doubled, interleaved under the
  same load. vmalert's notifications go to a stand-in Alertmanager in this process.

Measured after ``--warmup`` seconds of scraping (the whole run holds ``--lock FILE`` when
given), first while everything runs:

- the node tier: series per node (samples per scrape), remote-write samples and bytes per
  second per node and receiver (the agents' ``prometheus_remote_storage_*`` counters over
  the measuring window), failed samples;
- per store: active series and resident memory; every rule group's evaluation time over
  ``--evaluations`` evaluations (Prometheus: ``/api/v1/rules``; vmalert: its
  ``vmalert_iteration_duration_seconds`` per evaluation), rules evaluating without error,
  and the series each rule produces (records; ``ALERTS`` per alert);

then with the agents and vmalert paused (SIGSTOP), so that the stores hold their data but
ingest nothing and the queries compare the data held rather than the stores' write load:

- per store: every dashboard query with its variables resolved as Grafana resolves them
  against that store (``bench/fleet.py``'s method) at the moment of the pause, the median of
  ``--repeats`` runs taken round robin over the stores: queries accepted, queries with data,
  slowest and median wall time, and the store's own evaluation time (Prometheus'
  ``stats``, VictoriaMetrics' ``trace``);
- queries or rules whose data differs between the two kinds of store at the same size;
- node-scoped dashboards (a single-select node variable): each query's median evaluation
  time on N nodes over its median on N/2, target <= 1.3x (a difference under
  GROWTH_FLOOR_MS counts as none); and slowest / median wall time of all queries on N nodes,
  target <= 10x. The targets apply to the central Prometheus; VictoriaMetrics' figures are
  printed beside them.

VictoriaMetrics runs with ``-search.disableCache`` so that repeated queries are computed, not
served from its response cache (Prometheus has none). ``--stores prometheus`` leaves
VictoriaMetrics out. Exit 1 with ``--check`` when a target is missed, a query or rule fails
on either store, or data differs between them; 2 on an error.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import fleet_data
from bench.fleet import (
    PROMETHEUS,
    RULES_DIR,
    BenchError,
    GroupTiming,
    Prometheus,
    QueryTiming,
    _interrupted,
    _table,
    dashboard_queries,
    held,
    measure_groups,
    start_exporters,
    time_query,
)
from tests.dashboards.grafana import GRAFANA_DIR, load, variables
from tests.processes import free_port, stop_all

VICTORIA_METRICS = Path("/usr/bin/victoria-metrics")
VMALERT = Path("/usr/bin/vmalert")
KINDS = ("prometheus", "victoriametrics")
#: Acceptance: node-scoped queries when the fleet doubles, and the spread of all queries.
NODE_GROWTH_MAX = 1.3
GROWTH_FLOOR_MS = 0.1
QUERY_RATIO_MAX = 10.0
RACKS = ("rack-a", "rack-b")
_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

Json = dict[str, Any]
Sample = tuple[str, dict[str, str], float]


# --- the configurations (docs/scale.md shows them as examples) --------------------------------
def agent_config(targets: list[str], write_urls: list[str], interval: float) -> Json:
    """A Prometheus agent: scrape ``targets`` as the gpu-exporter job, remote-write all of it."""
    return {
        "global": {"scrape_interval": f"{interval:g}s",
                   "scrape_timeout": f"{min(10.0, interval):g}s"},
        "scrape_configs": [{"job_name": fleet_data.JOB,
                            "static_configs": [{"targets": targets}]}],
        "remote_write": [{"url": url} for url in write_urls],
    }


def central_prometheus_config(rule_files: list[Path], interval: float) -> Json:
    """The central Prometheus: no scrapes of its own, every rule file."""
    return {"global": {"evaluation_interval": f"{interval:g}s"},
            "rule_files": [str(p) for p in rule_files]}


def vmalert_args(rule_files: list[Path], store: str, notifier: str, interval: float) -> list[str]:
    """vmalert evaluating ``rule_files`` on the VictoriaMetrics at ``store``, writing records
    and alert state back to it and sending alerts to ``notifier`` (an Alertmanager)."""
    return [*(f"-rule={p}" for p in rule_files), f"-datasource.url={store}",
            f"-remoteWrite.url={store}", f"-remoteRead.url={store}",
            f"-notifier.url={notifier}", f"-evaluationInterval={interval:g}s"]


# --- processes --------------------------------------------------------------------------------
@dataclass
class Central:
    """One central store: its query API and where its rules run (itself, or vmalert)."""

    kind: str
    nodes: int
    store: Prometheus
    rules: Prometheus

    @property
    def name(self) -> str:
        """``kind-N``."""
        return f"{self.kind}-{self.nodes}"

    @property
    def write_url(self) -> str:
        """Its remote-write endpoint."""
        return f"{self.store.base}/api/v1/write"


@dataclass
class Launcher:
    """Starts servers in ``tmp`` (one folder and log each), keeping every process to stop."""

    tmp: Path
    deadline: float
    rule_files: list[Path]
    interval: float
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    #: Extra flags (a short test makes data visible sooner than the defaults do).
    victoria_flags: tuple[str, ...] = ()
    vmalert_flags: tuple[str, ...] = ()

    def server(self, name: str, argv: list[str], port: int, ready_path: str) -> Prometheus:
        """Start ``argv`` (logging to ``name.log``) and wait for ``ready_path`` to answer.

        Raises:
            BenchError: it exited or did not become ready.
        """
        log = self.tmp / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        self.processes.append(process)
        server = Prometheus(port, process, log, ready_path)
        server.wait_ready(self.deadline)
        return server

    def folder(self, name: str) -> Path:
        """A new folder for one server's configuration and data."""
        path = self.tmp / name
        path.mkdir()
        return path

    def central(self, kind: str, nodes: int, notifier: str) -> Central:
        """A central store of ``kind`` (and vmalert for VictoriaMetrics).

        Raises:
            BenchError: a server did not start.
        """
        name = f"{kind}-{nodes}"
        folder = self.folder(name)
        port = free_port()
        if kind == "prometheus":
            config = folder / "prometheus.yml"
            config.write_text(yaml.safe_dump(
                central_prometheus_config(self.rule_files, self.interval)))
            store = self.server(name, [
                str(PROMETHEUS), f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-remote-write-receiver", "--log.level=warn",
            ], port, "/-/ready")
            return Central(kind, nodes, store, store)
        store = self.server(name, [
            str(VICTORIA_METRICS), f"-storageDataPath={folder / 'data'}",
            f"-httpListenAddr=127.0.0.1:{port}", "-retentionPeriod=1d", "-search.disableCache",
            "-loggerLevel=WARN", *self.victoria_flags,
        ], port, "/health")
        alert_port = free_port()
        rules = self.server(f"vmalert-{nodes}", [
            str(VMALERT), *vmalert_args(self.rule_files, store.base, notifier, self.interval),
            f"-httpListenAddr=127.0.0.1:{alert_port}", "-loggerLevel=WARN", *self.vmalert_flags,
        ], alert_port, "/health")
        return Central(kind, nodes, store, rules)

    def agent(self, name: str, targets: list[str], write_urls: list[str]) -> Prometheus:
        """A Prometheus in agent mode.

        Raises:
            BenchError: it did not start.
        """
        folder = self.folder(name)
        config = folder / "agent.yml"
        config.write_text(yaml.safe_dump(agent_config(targets, write_urls, self.interval)))
        port = free_port()
        return self.server(name, [
            str(PROMETHEUS), "--enable-feature=agent", f"--config.file={config}",
            f"--storage.agent.path={folder / 'wal'}", f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ], port, "/-/ready")


class _Sink(BaseHTTPRequestHandler):
    """A stand-in Alertmanager: accepts every POST of alerts."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@contextlib.contextmanager
def alert_sink() -> Iterator[str]:
    """A threaded stand-in Alertmanager on 127.0.0.1; yields its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class TwoTier:
    """Everything that runs: agents, central stores, and when the data starts."""

    nodes: int
    interval: float
    agents: dict[str, Prometheus]
    agent_nodes: dict[str, int]
    centrals: list[Central]
    data_start: float


@contextlib.contextmanager
def two_tier(nodes: int, kinds: list[str], launcher: Launcher) -> Iterator[TwoTier]:
    """Start the central stores, the exporters and the two agents; stop them all at the end."""
    spec = fleet_data.FleetSpec(nodes, end=time.time())
    half = nodes // 2
    try:
        with alert_sink() as notifier:
            centrals = [launcher.central(kind, size, notifier)
                        for kind in kinds for size in (half, nodes)]
            ports = start_exporters(spec, launcher.tmp, launcher.processes)
            targets = [f"127.0.0.1:{p}" for p in ports]
            racks = {RACKS[0]: targets[:half], RACKS[1]: targets[half:]}
            started = time.time()
            agents = {}
            for rack, rack_targets in racks.items():
                urls = [c.write_url for c in centrals if rack == RACKS[0] or c.nodes == nodes]
                agents[rack] = launcher.agent(rack, rack_targets, urls)
            yield TwoTier(nodes, launcher.interval, agents,
                          {r: len(t) for r, t in racks.items()}, centrals, started)
    finally:
        stop_all(reversed(launcher.processes), timeout=10)


# --- measuring --------------------------------------------------------------------------------
def scrape(url: str) -> list[Sample]:
    """The samples of a text exposition (``/metrics``): (name, labels, value).

    Raises:
        BenchError: nothing answered.
    """
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode("utf-8", "replace")
    except OSError as exc:
        raise BenchError(f"{url}: {exc}") from exc
    samples = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or line.startswith("#"):
            continue
        labels = dict(_LABEL.findall(match.group(2) or ""))
        samples.append((match.group(1), labels, float(match.group(3))))
    return samples


def _value(samples: list[Sample], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples carrying ``labels``."""
    return sum(v for n, ls, v in samples
               if n == name and all(ls.get(k) == want for k, want in labels.items()))


def instant(server: Prometheus, expr: str) -> float:
    """An instant query's first value (0 when empty).

    Raises:
        BenchError: the query failed.
    """
    result = server.api("/api/v1/query", query=expr)["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


def wait_up(setup: TwoTier, deadline: float) -> None:
    """Until every central store sees each of its nodes up.

    Raises:
        BenchError: the deadline passed.
    """
    for central in setup.centrals:
        expr = f'count(up{{job="{fleet_data.JOB}"}} == 1)'
        while instant(central.store, expr) < central.nodes:
            if time.monotonic() > deadline:
                raise BenchError(f"{central.name}: not every node is up")
            time.sleep(1)


def measure_vmalert_groups(vmalert: Prometheus, interval: float, evaluations: int,
                           deadline: float) -> list[GroupTiming]:
    """vmalert's groups: each evaluation's duration (``vmalert_iteration_duration_seconds``,
    read between evaluations) until every group has ``evaluations``; rule times from
    ``/api/v1/rules``."""
    metrics_url = vmalert.base + "/metrics"

    def totals() -> dict[tuple[str, str], tuple[float, float]]:
        samples = scrape(metrics_url)
        keys = {(ls["file"], ls["group"]) for n, ls, _ in samples
                if n == "vmalert_iteration_duration_seconds_count"}
        return {key: (_value(samples, "vmalert_iteration_duration_seconds_sum",
                             file=key[0], group=key[1]),
                      _value(samples, "vmalert_iteration_duration_seconds_count",
                             file=key[0], group=key[1])) for key in keys}

    timings: dict[tuple[str, str], GroupTiming] = {}
    seen: dict[str, str] = {}
    last = totals()
    while True:
        for group in vmalert.api("/api/v1/rules")["data"]["groups"]:
            key = (group["file"], group["name"])
            timing = timings.setdefault(key, GroupTiming(
                group["name"], Path(group["file"]).name, len(group["rules"])))
            for rule in group["rules"]:
                if seen.get(rule["id"]) != rule["lastEvaluation"]:
                    seen[rule["id"]] = rule["lastEvaluation"]
                    timing.rule_seconds.setdefault(rule["name"], []).append(
                        float(rule["evaluationTime"]))
        now = totals()
        for key, (total, count) in now.items():
            before = last.get(key, (total, count))
            runs = int(count - before[1])
            if key in timings and runs > 0:
                timings[key].seconds += [(total - before[0]) / runs] * runs
        last = now
        if timings and all(len(t.seconds) >= evaluations for t in timings.values()):
            break
        if time.monotonic() > deadline:
            break
        time.sleep(min(1.0, interval / 4))
    return list(timings.values())


@dataclass
class RuleState:
    """Per store: rules evaluating without error, and the series each rule produces."""

    rules: int = 0
    failing: dict[str, str] = field(default_factory=dict)
    series: dict[str, int] = field(default_factory=dict)


def rule_state(central: Central) -> RuleState:
    """Health of every rule (``/api/v1/rules``, the same shape on Prometheus and vmalert) and
    what it produces on the store: ``count(record)``, active ``ALERTS`` per alert."""
    state = RuleState()
    alerts = central.store.api("/api/v1/query", query="count by (alertname) (ALERTS)")
    firing = {r["metric"]["alertname"]: int(float(r["value"][1]))
              for r in alerts["data"]["result"]}
    for group in central.rules.api("/api/v1/rules")["data"]["groups"]:
        for rule in group["rules"]:
            state.rules += 1
            name = rule["name"]
            if rule.get("health") != "ok" or rule.get("lastError"):
                state.failing[name] = rule.get("lastError") or rule.get("health", "?")
            if rule["type"] == "alerting":
                state.series[name] = firing.get(name, 0)
            else:
                state.series[name] = int(instant(central.store, f"count({name})"))
    return state


@dataclass
class RemoteWrite:
    """One agent -> receiver stream over the measuring window."""

    agent: str
    receiver: str
    nodes: int
    seconds: float
    samples: float
    bytes: float
    failed: float

    @property
    def bytes_per_node(self) -> float:
        """Compressed bytes per second and node."""
        return self.bytes / self.seconds / self.nodes

    @property
    def samples_per_node(self) -> float:
        """Samples per second and node."""
        return self.samples / self.seconds / self.nodes


def remote_write_totals(setup: TwoTier) -> dict[tuple[str, str], tuple[float, float, float]]:
    """(agent, receiver URL) -> (samples, bytes, failed samples) sent so far."""
    totals = {}
    for rack, agent in setup.agents.items():
        samples = scrape(agent.base + "/metrics")
        urls = {ls["url"] for n, ls, _ in samples if n == "prometheus_remote_storage_bytes_total"}
        for url in urls:
            totals[(rack, url)] = (
                _value(samples, "prometheus_remote_storage_samples_total", url=url),
                _value(samples, "prometheus_remote_storage_bytes_total", url=url),
                _value(samples, "prometheus_remote_storage_samples_failed_total", url=url))
    return totals


def remote_write_rates(setup: TwoTier, before: dict[tuple[str, str], tuple[float, float, float]],
                       after: dict[tuple[str, str], tuple[float, float, float]],
                       seconds: float) -> list[RemoteWrite]:
    """Each stream's traffic between two ``remote_write_totals``."""
    names = {c.write_url: c.name for c in setup.centrals}
    streams = []
    for (rack, url), (samples, sent, failed) in sorted(after.items()):
        start = before.get((rack, url), (0.0, 0.0, 0.0))
        streams.append(RemoteWrite(rack, names.get(url, url), setup.agent_nodes[rack], seconds,
                                   samples - start[0], sent - start[1], failed))
    return streams


@dataclass
class StoreFigures:
    """What one central store measured."""

    central: Central
    groups: list[GroupTiming]
    rules: RuleState
    queries: list[QueryTiming]
    active_series: int
    resident_bytes: float
    series_per_node: float


def node_scoped(board_file: Path) -> bool:
    """A dashboard showing one node at a time (its ``node`` variable is single-select)."""
    return any(v["name"] == "node" and not v.get("multi") for v in variables(load(board_file)))


@contextlib.contextmanager
def ingestion_paused(setup: TwoTier) -> Iterator[float]:
    """The agents and vmalert stopped (SIGSTOP) and resumed at the end: the stores hold their
    data but take no more writes, so queries compare the data held, not the stores' load.
    Yields the time of the pause (queries run at that instant)."""
    paused = [agent.process for agent in setup.agents.values()] + [
        c.rules.process for c in setup.centrals if c.rules is not c.store]
    for process in paused:
        process.send_signal(signal.SIGSTOP)
    try:
        yield time.time()
    finally:
        for process in paused:
            process.send_signal(signal.SIGCONT)


def measure(setup: TwoTier, args: argparse.Namespace, deadline: float) -> tuple[
        list[StoreFigures], list[RemoteWrite]]:
    """While everything runs: rule groups (every store at once), remote write, the stores'
    series and memory. Then, ingestion paused, the queries (round robin over the stores)."""
    began, before = time.monotonic(), remote_write_totals(setup)

    def groups_of(central: Central) -> list[GroupTiming]:
        if central.kind == "prometheus":
            return measure_groups(central.rules, setup.interval, args.evaluations, deadline)
        return measure_vmalert_groups(central.rules, setup.interval, args.evaluations, deadline)

    with ThreadPoolExecutor(len(setup.centrals)) as pool:
        groups = list(pool.map(groups_of, setup.centrals))
    streams = remote_write_rates(setup, before, remote_write_totals(setup),
                                 time.monotonic() - began)
    figures = []
    for central, timings in zip(setup.centrals, groups, strict=True):
        own = scrape(central.store.base + "/metrics")
        figures.append(StoreFigures(
            central, timings, rule_state(central), [],
            int(instant(central.store, 'count({__name__!=""})')),
            _value(own, "process_resident_memory_bytes"),
            instant(central.store, f'avg(scrape_samples_scraped{{job="{fleet_data.JOB}"}})'),
        ))
    files = sorted(args.dashboards.glob("*.json"))
    with ingestion_paused(setup) as end:
        time.sleep(1.0)
        queries = [dashboard_queries(c.store.port, files, setup.data_start, end, setup.interval)
                   for c in setup.centrals]
        for repeat in range(args.repeats):
            for index in range(len(queries[0])):
                # Alternate the order so no store always runs right after the same one.
                order = range(len(setup.centrals)) if (repeat + index) % 2 == 0 else \
                    reversed(range(len(setup.centrals)))
                for k in order:
                    if time.monotonic() > deadline:
                        raise BenchError("out of time while running the dashboard queries")
                    time_query(setup.centrals[k].store, queries[k][index], end, setup.interval,
                               args.query_timeout)
    for fig, store_queries in zip(figures, queries, strict=True):
        fig.queries = store_queries
    return figures, streams


# --- reporting --------------------------------------------------------------------------------
def _growth(after_ms: float, before_ms: float) -> float:
    """``after / before``, where a difference under GROWTH_FLOOR_MS counts as no growth (a
    query of a few microseconds moves by more than 1.3x from one run to the next)."""
    return 1.0 if after_ms - before_ms < GROWTH_FLOOR_MS else after_ms / before_ms


def _verdict(kind: str, value: float, target: float) -> str:
    """The target and whether ``value`` meets it (the targets are the central Prometheus')."""
    if kind != "prometheus":
        return f"(Prometheus' target <= {target:g}x)"
    return f"(target <= {target:g}x) {'PASS' if value <= target else 'FAIL'}"


def _ratio(values: list[float]) -> float:
    return max(values) / statistics.median(values) if values else float("nan")


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.1f}"


def _differences(figures: list[StoreFigures]) -> list[str]:
    """Queries and rules with data on one kind of store and none on the other (same size)."""
    out = []
    by_size: dict[int, list[StoreFigures]] = {}
    for fig in figures:
        by_size.setdefault(fig.central.nodes, []).append(fig)
    for size, same in sorted(by_size.items()):
        for a, b in itertools.pairwise(same):
            for qa, qb in zip(a.queries, b.queries, strict=True):
                if (qa.series > 0) != (qb.series > 0):
                    out.append(f"{size} nodes: {qa.dashboard} / {qa.panel} [{qa.ref}]: "
                               f"{qa.series} series on {a.central.kind}, {qb.series} on "
                               f"{b.central.kind}")
            for name, count in sorted(a.rules.series.items()):
                other = b.rules.series.get(name, 0)
                if (count > 0) != (other > 0):
                    out.append(f"{size} nodes: rule {name}: {count} series on {a.central.kind}, "
                               f"{other} on {b.central.kind}")
    return out


def report(setup: TwoTier, figures: list[StoreFigures],
           streams: list[RemoteWrite], node_boards: set[str]) -> tuple[str, bool]:
    """The printed report, and whether every target and check passed."""
    ok = True
    out = [f"# Two-tier fleet benchmark: {setup.nodes} live simulated nodes "
           f"(synthetic:8x32), two Prometheus agents ({', '.join(RACKS)}: "
           f"{', '.join(str(n) for n in setup.agent_nodes.values())} nodes) scraping every "
           f"{setup.interval:g} s and remote-writing to "
           f"{', '.join(f.central.name for f in figures)} (store-N: N nodes)", ""]
    rows = [[s.agent, s.receiver, str(s.nodes), f"{s.samples_per_node:,.0f}",
             f"{s.bytes_per_node:,.0f}", f"{s.failed:,.0f}"] for s in streams]
    out += ["## Node tier: remote write per node", _table(
        ["agent", "receiver", "nodes", "samples/s/node", "bytes/s/node", "failed samples"],
        rows, {2, 3, 4, 5}), ""]
    if any(s.failed for s in streams):
        ok = False
    header = ["", *(f.central.name for f in figures)]
    medians = {f.central.name: [q.median_ms for q in f.queries if q.seconds] for f in figures}

    def slowest(fig: StoreFigures) -> QueryTiming:
        return max(fig.queries, key=lambda q: q.median_ms)

    def slowest_group(fig: StoreFigures) -> GroupTiming:
        return max(fig.groups, key=lambda g: g.mean_ms)

    rows = [
        ["series per node (samples per scrape)", *(f"{f.series_per_node:,.0f}" for f in figures)],
        ["active series held", *(f"{f.active_series:,}" for f in figures)],
        ["resident memory MiB", *(f"{f.resident_bytes / 2**20:,.0f}" for f in figures)],
        ["rules without error", *(f"{f.rules.rules - len(f.rules.failing)}/{f.rules.rules}"
                                  for f in figures)],
        ["rules producing series", *(f"{sum(1 for v in f.rules.series.values() if v)}"
                                     for f in figures)],
        ["rule groups: median ms", *(f"{statistics.median(g.mean_ms for g in f.groups):.1f}"
                                     for f in figures)],
        ["rule groups: slowest ms", *(f"{slowest_group(f).mean_ms:.1f}" for f in figures)],
        ["  (slowest group)", *(slowest_group(f).name for f in figures)],
        ["rule groups: slowest / median", *(f"{_ratio([g.mean_ms for g in f.groups]):.1f}x"
                                            for f in figures)],
        ["queries accepted", *(f"{sum(1 for q in f.queries if q.seconds)}/{len(f.queries)}"
                               for f in figures)],
        ["queries with data", *(f"{sum(1 for q in f.queries if q.series)}" for f in figures)],
        ["queries: median ms", *(f"{statistics.median(medians[f.central.name]):.1f}"
                                 for f in figures)],
        ["queries: slowest ms", *(f"{slowest(f).median_ms:.1f}" for f in figures)],
        ["  (slowest query)", *(f"{slowest(f).dashboard.removeprefix('gpu-')}: "
                                f"{slowest(f).panel[:28]}" for f in figures)],
        ["queries: slowest / median", *(f"{_ratio(medians[f.central.name]):.1f}x"
                                        for f in figures)],
    ]
    out += ["## Central stores", _table(header, rows, set(range(1, len(header)))), ""]
    for fig in figures:
        if fig.rules.failing:
            ok = False
            out.append(f"{fig.central.name}: rules failing: " + "; ".join(
                f"{n}: {e}" for n, e in sorted(fig.rules.failing.items())))
        if any(not q.seconds for q in fig.queries):
            ok = False
        groups = sorted(fig.groups, key=lambda g: -g.mean_ms)
        out.append(f"{fig.central.name} groups (mean ms over evaluations): " + ", ".join(
            f"{g.name} {g.mean_ms:.1f} ({len(g.seconds)})" for g in groups))
    out.append("")
    differences = _differences(figures)
    out += ["## Data on one kind of store and not the other",
            *(differences or ["none: every query and rule has data on both or on neither"]), ""]
    ok = ok and not differences
    # Node-scoped dashboards when the fleet doubles, and the spread at full size.
    for kind in dict.fromkeys(f.central.kind for f in figures):
        pair = sorted((f for f in figures if f.central.kind == kind), key=lambda f: f.central.nodes)
        small, full = pair[0], pair[-1]
        growth = sorted(((_growth(b.server_median_ms, a.server_median_ms),
                          b.median_ms / a.median_ms, a, b)
                         for a, b in zip(small.queries, full.queries, strict=True)
                         if a.dashboard in node_boards and a.server_seconds and b.server_seconds),
                        key=lambda t: (-t[0], -t[1]))
        worst = growth[0][0] if growth else float("nan")
        worst_wall = max((t[1] for t in growth), default=float("nan"))
        spread = _ratio(medians[full.central.name])
        n, m = small.central.nodes, full.central.nodes
        rows = [[f"{server:.2f}x", f"{wall:.2f}x", a.panel[:36], a.ref, a.kind,
                 f"{a.server_median_ms:.3f}", f"{b.server_median_ms:.3f}", f"{a.median_ms:.2f}",
                 f"{b.median_ms:.2f}", f"{a.samples:,}", f"{b.samples:,}"]
                for server, wall, a, b in growth[:12]]
        out += [f"## {kind}: node-scoped dashboards ({', '.join(sorted(node_boards))}) at "
                f"{m} vs {n} nodes, the most grown first (server: the store's own evaluation "
                f"time, growth counted above {GROWTH_FLOOR_MS:g} ms; wall: as Grafana waits)",
                _table(["server", "wall", "panel", "ref", "kind", f"server ms {n}",
                        f"server ms {m}", f"wall ms {n}", f"wall ms {m}", f"samples {n}",
                        f"samples {m}"], rows, {0, 1, 5, 6, 7, 8, 9, 10}),
                f"{kind}: largest growth {worst:.2f}x server "
                f"{_verdict(kind, worst, NODE_GROWTH_MAX)}, {worst_wall:.2f}x wall; slowest / "
                f"median query at {m} nodes {spread:.1f}x "
                f"{_verdict(kind, spread, QUERY_RATIO_MAX)}", ""]
        if kind == "prometheus":
            ok = ok and worst <= NODE_GROWTH_MAX and spread <= QUERY_RATIO_MAX
    return "\n".join(out), ok


def figures_json(figures: list[StoreFigures], streams: list[RemoteWrite]) -> Json:
    """Every figure, for ``--json``."""
    return {
        "remote_write": [vars(s) for s in streams],
        "stores": [{
            "store": f.central.name, "active_series": f.active_series,
            "resident_bytes": f.resident_bytes, "series_per_node": f.series_per_node,
            "rules_failing": f.rules.failing, "rule_series": f.rules.series,
            "groups": [{"name": g.name, "file": g.file, "mean_ms": g.mean_ms,
                        "evaluations": len(g.seconds)} for g in f.groups],
            "queries": [{"dashboard": q.dashboard, "panel": q.panel, "ref": q.ref,
                         "kind": q.kind, "median_ms": q.median_ms,
                         "server_median_ms": q.server_median_ms, "series": q.series,
                         "samples": q.samples, "expr": q.expr} for q in f.queries],
        } for f in figures],
    }


def missing_programs(kinds: list[str]) -> list[str]:
    """Debian packages this run needs that are not installed."""
    needed = {"prometheus": [Path(PROMETHEUS)], "victoria-metrics": [VICTORIA_METRICS, VMALERT]}
    wanted = ["prometheus", *(["victoria-metrics"] if "victoriametrics" in kinds else [])]
    return [package for package in wanted if not all(p.exists() for p in needed[package])]


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=24,
                        help="simulated nodes (the half-size stores get half of them)")
    parser.add_argument("--stores", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--interval", type=float, default=15.0,
                        help="scrape and evaluation interval in seconds")
    parser.add_argument("--warmup", type=float, default=180.0,
                        help="seconds of scraping before measuring")
    parser.add_argument("--evaluations", type=int, default=3,
                        help="evaluations of every rule group to time (the accounting group "
                             "runs once a minute)")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--query-timeout", type=float, default=60.0)
    parser.add_argument("--lock", type=Path, default=None,
                        help="flock this file while measuring (e.g. a shared bench lock)")
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    parser.add_argument("--rules", type=Path, default=RULES_DIR)
    parser.add_argument("--dashboards", type=Path, default=GRAFANA_DIR)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a target is missed or a query or rule fails")
    args = parser.parse_args(argv)
    if args.nodes < 2:
        parser.error("--nodes must be at least 2 (two racks)")
    missing = missing_programs(args.stores)
    if missing:
        print(f"fleet_two_tier needs Debian's {' and '.join(missing)} package: "
              f"apt-get install {' '.join(missing)}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupted)
    deadline = time.monotonic() + args.max_seconds
    rules = sorted(args.rules.glob("*.yaml"))
    node_boards = {p.stem for p in sorted(args.dashboards.glob("*.json")) if node_scoped(p)}
    with tempfile.TemporaryDirectory(prefix="fleet-two-tier-") as name:
        try:
            launcher = Launcher(Path(name), deadline, rules, args.interval)
            with held(args.lock), two_tier(args.nodes, args.stores, launcher) as setup:
                wait_up(setup, deadline)
                time.sleep(max(0.0, args.warmup - (time.time() - setup.data_start)))
                figures, streams = measure(setup, args, deadline)
        except (BenchError, subprocess.SubprocessError, OSError) as exc:
            print(f"two-tier benchmark failed: {exc}", file=sys.stderr)
            return 2
    text, ok = report(setup, figures, streams, node_boards)
    print(text)
    if args.json is not None:
        args.json.write_text(json.dumps(figures_json(figures, streams), indent=1))
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
