"""Fleet benchmark: the repo's rules and dashboards on a real Prometheus holding N GPU nodes.

Usage (from the repository root)::

    .venv/bin/python bench/fleet.py --live 12            # 12 live simulated exporters
    .venv/bin/python bench/fleet.py --backfill 100       # 100 nodes: 1 h backfilled + scrapes

``--live N`` starts N ``gpu-exporter --source simulated --scenario synthetic:8x32 --hostname
nodeNNN`` processes on 127.0.0.1 and a Prometheus (Debian's) scraping and evaluating every
``--interval`` seconds (default 5) with every rule file of ``dashboards/rules/``.

``--backfill N`` is for fleets too large to run live on one small machine: ``fleet_data.py``
renders ``--minutes`` of history for N nodes with the exporter's own code (the same flags as
the live exporters, one seed per node), ``promtool tsdb create-blocks-from openmetrics`` turns
it into TSDB blocks, and Prometheus starts on them; a stand-in target in this process then
serves each node's last exposition, so rules evaluate on fresh scrapes continuing the history.

Then, under ``--lock FILE`` when given (the measuring part only):

- every rule group's evaluation time, from ``/api/v1/rules`` ``evaluationTime``, averaged
  over ``--evaluations`` distinct evaluations, with the series each group produces (recorded
  series, active alerts);
- every dashboard query with its variables resolved the way Grafana would (All = a regex of
  every value; single-select = the first), over the dashboard's default range clamped to the
  data held (range queries, step = range / 1000 but at least the scrape interval) or at the
  end (instant ones); the median of ``--repeats`` runs, with result series and samples read;
- the acceptance ratios: slowest group / median group <= 5, slowest query / median query <= 10.

Everything is bounded by ``--max-seconds``; every process started here is stopped at the end.
Exit 1 when an acceptance ratio is missed (``--check``), 2 on an error.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import fleet_data
from tests.dashboards.grafana import GRAFANA_DIR, load, targets
from tests.dashboards.live import Stack, resolve_variables, substitute
from tests.processes import free_port, stop_all

ROOT = Path(__file__).resolve().parent.parent
PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"
RULES_DIR = ROOT / "dashboards" / "rules"
#: Acceptance (issue 15): ratios on one run, since this machine is noisy.
GROUP_RATIO_MAX = 5.0
QUERY_RATIO_MAX = 10.0
#: Grafana's default maximum number of points of a time series panel (its width in pixels).
MAX_DATA_POINTS = 1000

Json = dict[str, Any]


class BenchError(RuntimeError):
    """Something the benchmark needs failed (a process exited, Prometheus rejected a query)."""


def http_json(url: str, timeout: float) -> Json:
    """GET ``url`` and decode its JSON (also for 4xx answers).

    Raises:
        BenchError: nothing answered.
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            data: Json = json.loads(response.read())
    except urllib.error.HTTPError as err:
        data = json.loads(err.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        raise BenchError(f"{url}: {exc}") from exc
    return data


@dataclass
class Prometheus:
    """A Prometheus process started here (or a server with its HTTP API: VictoriaMetrics,
    vmalert), with its API."""

    port: int
    process: subprocess.Popen[bytes]
    log: Path
    ready_path: str = "/-/ready"

    @property
    def base(self) -> str:
        """Its base URL."""
        return f"http://127.0.0.1:{self.port}"

    def api(self, path: str, wait: float = 120.0, **params: Any) -> Json:
        """GET an API path, waiting up to ``wait`` seconds for the answer.

        Raises:
            BenchError: no answer, or an error status.
        """
        if self.process.poll() is not None:
            raise BenchError(f"{self.log.stem} exited:\n{self.log.read_text()[-3000:]}")
        query = urllib.parse.urlencode(params, doseq=True)
        answer = http_json(f"{self.base}{path}?{query}", wait)
        if answer.get("status") != "success":
            raise BenchError(f"{path} {params.get('query', '')}: {answer.get('error', answer)}")
        return answer

    def wait_ready(self, deadline: float) -> None:
        """Block until ``ready_path`` answers.

        Raises:
            BenchError: the server exited or the deadline passed.
        """
        while True:
            if self.process.poll() is not None:
                raise BenchError(f"{self.log.stem} exited:\n{self.log.read_text()[-3000:]}")
            with contextlib.suppress(OSError, urllib.error.URLError), \
                    urllib.request.urlopen(self.base + self.ready_path, timeout=2) as response:
                if response.status == 200:
                    return
            if time.monotonic() > deadline:
                raise BenchError(f"{self.log.stem} not ready in time")
            time.sleep(0.5)


def start_prometheus(tmp: Path, tsdb: Path, scrape: Json, *, interval: float,
                     rule_files: list[Path], deadline: float) -> Prometheus:
    """Prometheus with ``rule_files`` and one scrape job ``scrape``.

    Raises:
        BenchError: it exited or did not become ready.
    """
    config = {
        "global": {"scrape_interval": f"{interval:g}s", "evaluation_interval": f"{interval:g}s",
                   "scrape_timeout": f"{min(10.0, interval):g}s"},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [{"job_name": fleet_data.JOB, **scrape}],
    }
    config_file = tmp / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    port = free_port()
    log = tmp / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config_file}", f"--storage.tsdb.path={tsdb}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
             "--query.max-samples=200000000"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    prom = Prometheus(port, process, log)
    prom.wait_ready(deadline)
    return prom


class _LastBodies(BaseHTTPRequestHandler):
    """Serves ``/metrics?node=nodeNNN``: that node's last generated exposition."""

    bodies: Mapping[str, bytes] = {}

    def do_GET(self) -> None:
        node = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query).get("node", [""])[0]
        body = self.bodies.get(node)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@contextlib.contextmanager
def stand_in_targets(bodies: Mapping[str, bytes]) -> Iterator[int]:
    """A threaded HTTP server on 127.0.0.1 serving ``bodies``; yields its port."""
    handler = type("Handler", (_LastBodies,), {"bodies": dict(bodies)})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Fleet:
    """What runs: Prometheus, the processes to stop, and how much data it holds."""

    prometheus: Prometheus
    nodes: int
    interval: float
    data_start: float  # Unix time of the oldest sample
    notes: list[str] = field(default_factory=list)


def start_exporters(spec: fleet_data.FleetSpec, tmp: Path,
                    processes: list[subprocess.Popen[bytes]]) -> list[int]:
    """One live simulated exporter per node of ``spec`` on 127.0.0.1 (appended to
    ``processes``, for the caller to stop); their ports."""
    ports = []
    for node in range(spec.nodes):
        port = free_port()
        with (tmp / f"exporter-{node}.log").open("wb") as log:
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "exporter", *fleet_data.exporter_args(spec, node),
                 "--web.listen-address", f"127.0.0.1:{port}", "--log.level", "warning"],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
            ))
        ports.append(port)
    return ports


@contextlib.contextmanager
def live_fleet(nodes: int, interval: float, rule_files: list[Path], tmp: Path,
               deadline: float) -> Iterator[Fleet]:
    """``nodes`` live simulated exporters scraped by Prometheus."""
    spec = fleet_data.FleetSpec(nodes, end=time.time())
    processes: list[subprocess.Popen[bytes]] = []
    try:
        ports = start_exporters(spec, tmp, processes)
        scrape = {"static_configs": [{"targets": [f"127.0.0.1:{p}" for p in ports]}]}
        started = time.time()
        prom = start_prometheus(tmp, tmp / "tsdb", scrape, interval=interval,
                                rule_files=rule_files, deadline=deadline)
        processes.append(prom.process)
        yield Fleet(prom, nodes, interval, started,
                    [f"{nodes} live exporters ({spec.scenario}), scrape and evaluation every "
                     f"{interval:g} s"])
    finally:
        stop_all(processes, timeout=10)


@contextlib.contextmanager
def backfilled_fleet(spec: fleet_data.FleetSpec, workers: int, rule_files: list[Path],
                     tmp: Path, deadline: float) -> Iterator[Fleet]:
    """``spec``'s history in TSDB blocks, then fresh scrapes of each node's last exposition."""
    nodes, minutes, interval = spec.nodes, spec.minutes, spec.interval
    data = tmp / "fleet.om"
    began = time.monotonic()
    samples, last = fleet_data.generate(spec, data, workers)
    generated = time.monotonic() - began
    size = data.stat().st_size
    began = time.monotonic()
    tsdb = tmp / "tsdb"
    result = subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(data), str(tsdb)],
        capture_output=True, text=True, timeout=max(60.0, deadline - time.monotonic()),
        check=False,
    )
    if result.returncode != 0:
        raise BenchError(f"promtool failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    backfilled = time.monotonic() - began
    data.unlink()
    bodies = {fleet_data.hostname(n): body.encode() for n, body in last.items()}
    with stand_in_targets(bodies) as port:
        scrape = {
            "metrics_path": "/metrics",
            "static_configs": [{"targets": sorted(bodies)}],
            "relabel_configs": [
                {"source_labels": ["__address__"], "target_label": "__param_node"},
                {"source_labels": ["__address__"], "target_label": "instance"},
                {"target_label": "__address__", "replacement": f"127.0.0.1:{port}"},
            ],
        }
        prom = start_prometheus(tmp, tsdb, scrape, interval=interval, rule_files=rule_files,
                                deadline=deadline)
        try:
            yield Fleet(prom, nodes, interval, spec.times()[0], [
                f"{nodes} nodes ({spec.scenario}); {minutes:g} min of history every "
                f"{interval:g} s: {samples:,} samples ({size / 2**20:,.0f} MiB OpenMetrics, "
                f"generated in {generated:.0f} s, blocks written by promtool in "
                f"{backfilled:.0f} s); then scrapes of each node's last exposition; "
                f"evaluation every {interval:g} s",
            ])
        finally:
            stop_all([prom.process], timeout=20)


# --- measuring --------------------------------------------------------------------------------
@dataclass
class GroupTiming:
    """One rule group: evaluation times seen and the series it produces."""

    name: str
    file: str
    rules: int
    seconds: list[float] = field(default_factory=list)
    series: int = 0
    rule_seconds: dict[str, list[float]] = field(default_factory=dict)

    @property
    def mean_ms(self) -> float:
        """Average evaluation time in milliseconds."""
        return 1000 * statistics.fmean(self.seconds) if self.seconds else float("nan")


def wait_fresh(fleet: Fleet, deadline: float) -> None:
    """Until every node's target is up and every group has evaluated twice since.

    Raises:
        BenchError: the deadline passed.
    """
    prom = fleet.prometheus
    while True:
        up = prom.api("/api/v1/query", query=f'count(up{{job="{fleet_data.JOB}"}} == 1)')
        result = up["data"]["result"]
        if result and int(float(result[0]["value"][1])) == fleet.nodes:
            break
        if time.monotonic() > deadline:
            raise BenchError(f"not every target is up: {result}")
        time.sleep(1)
    since = time.time() + 2 * fleet.interval
    while time.time() < since:
        time.sleep(0.5)


def measure_groups(prom: Prometheus, interval: float, evaluations: int,
                   deadline: float) -> list[GroupTiming]:
    """Poll ``/api/v1/rules`` until every group has ``evaluations`` distinct evaluations."""
    timings: dict[str, GroupTiming] = {}
    seen: dict[str, set[str]] = {}
    while True:
        groups = prom.api("/api/v1/rules")["data"]["groups"]
        for group in groups:
            key = f"{group['file']}/{group['name']}"
            timing = timings.setdefault(key, GroupTiming(
                group["name"], Path(group["file"]).name, len(group["rules"])))
            stamps = seen.setdefault(key, set())
            stamp = group.get("lastEvaluation", "")
            if stamp in stamps or stamp.startswith("0001-"):
                continue
            stamps.add(stamp)
            timing.seconds.append(float(group["evaluationTime"]))
            for rule in group["rules"]:
                name = rule.get("name", "?")
                timing.rule_seconds.setdefault(name, []).append(float(rule["evaluationTime"]))
        if timings and all(len(t.seconds) >= evaluations for t in timings.values()):
            break
        if time.monotonic() > deadline:
            break
        time.sleep(min(1.0, interval / 4))
    # Series each group produces: recorded series, and active (pending or firing) alerts.
    groups = prom.api("/api/v1/rules")["data"]["groups"]
    for group in groups:
        timing = timings[f"{group['file']}/{group['name']}"]
        timing.series = 0
        for rule in group["rules"]:
            if rule["type"] == "alerting":
                timing.series += len(rule.get("alerts", []))
            else:
                answer = prom.api("/api/v1/query", query=f"count({rule['name']})")
                result = answer["data"]["result"]
                timing.series += int(float(result[0]["value"][1])) if result else 0
    return list(timings.values())


@dataclass
class QueryTiming:
    """One dashboard query as Grafana would send it."""

    dashboard: str
    panel: str
    ref: str
    kind: str  # "range" or "instant"
    expr: str
    span: float  # seconds of the range (range queries)
    seconds: list[float] = field(default_factory=list)
    series: int = 0
    samples: int = 0
    timed_out: bool = False  # counted as the timeout (a lower bound of its real time)
    #: The server's own evaluation time of each run, where it reports one.
    server_seconds: list[float] = field(default_factory=list)

    @property
    def median_ms(self) -> float:
        """Median wall time in milliseconds."""
        return 1000 * statistics.median(self.seconds) if self.seconds else float("nan")

    @property
    def server_median_ms(self) -> float:
        """Median of the server's evaluation time in milliseconds (NaN when not reported)."""
        return (1000 * statistics.median(self.server_seconds) if self.server_seconds
                else float("nan"))


def _grafana_builtins(range_seconds: float, scrape: float) -> dict[str, str]:
    """Grafana's interval variables for a range (step: range / max points, >= scrape)."""
    step = max(scrape, range_seconds / MAX_DATA_POINTS)
    return {
        "__interval": f"{int(step)}s",
        "__rate_interval": f"{int(max(step + scrape, 4 * scrape))}s",
        "__range": f"{int(range_seconds)}s",
        "__range_s": str(int(range_seconds)),
    }


def _dashboard_range(board: Json) -> float:
    """The dashboard's default range (``now-6h`` -> 21600) in seconds."""
    since = board["time"]["from"]
    units = {"m": 60, "h": 3600, "d": 86400}
    return float(int(since[4:-1]) * units[since[-1]])


def dashboard_queries(port: int, files: list[Path], data_start: float, end: float,
                      interval: float, *,
                      pick: Mapping[str, str] | None = None) -> list[QueryTiming]:
    """Every panel query of every dashboard, variables resolved against the Prometheus API on
    ``port`` (holding data from ``data_start``, scraped every ``interval`` s; single-select
    variables take ``pick``'s value, else their first), not yet run."""
    stack = Stack(Path(tempfile.gettempdir()))
    stack.prometheus_port = port
    queries = []
    for path in files:
        board = load(path)
        span = min(_dashboard_range(board), end - data_start)
        # A fleet without Kubernetes or Slurm has no namespaces or jobs: Grafana's "None" ("").
        values = resolve_variables(stack, board, end - span, end, pick, empty="")
        values.update(_grafana_builtins(span, interval))
        for panel, target in targets(board):
            expr = substitute(target["expr"], values)
            if "$" in expr:
                raise BenchError(f"unresolved variable in {path.name} / {panel['title']}: {expr}")
            kind = "instant" if target.get("instant") else "range"
            queries.append(
                QueryTiming(path.stem, panel["title"], target["refId"], kind, expr, span))
    return queries


def run_queries(fleet: Fleet, queries: list[QueryTiming], end: float, *, repeats: int,
                timeout: float, deadline: float) -> None:
    """Run each query ``repeats`` times (round robin, so noise spreads over all of them).

    A query Prometheus aborts after ``timeout`` seconds counts as taking ``timeout`` and is
    not repeated.

    Raises:
        BenchError: Prometheus rejected a query for another reason.
    """
    for _ in range(repeats):
        for q in queries:
            if time.monotonic() > deadline:
                return
            time_query(fleet.prometheus, q, end, fleet.interval, timeout)


def time_query(prom: Prometheus, q: QueryTiming, end: float, interval: float,
               timeout: float) -> None:
    """Run ``q`` once as Grafana would (range: step = span / max points, at least
    ``interval``), adding its wall time, result series, samples read and the server's own
    evaluation time (Prometheus: ``stats=all``; VictoriaMetrics: ``trace=1``; each ignores
    the other's parameter) to ``q``. A query aborted after ``timeout`` s counts as ``timeout``.

    Raises:
        BenchError: the server rejected the query for another reason.
    """
    if q.timed_out:
        return
    step = max(interval, q.span / MAX_DATA_POINTS)
    params: dict[str, Any] = {"query": q.expr, "stats": "all", "trace": "1",
                              "timeout": f"{timeout:g}s"}
    if q.kind == "range":
        path = "/api/v1/query_range"
        params.update(start=end - q.span, end=end, step=f"{step:g}")
    else:
        path = "/api/v1/query"
        params["time"] = end
    began = time.perf_counter()
    try:
        answer = prom.api(path, wait=timeout + 30, **params)
    except BenchError as exc:
        if "timed out" not in str(exc) and "timeout" not in str(exc):
            raise
        q.seconds.append(timeout)
        q.timed_out = True
        return
    q.seconds.append(time.perf_counter() - began)
    q.series = len(answer["data"]["result"])
    stats = answer["data"].get("stats", {})
    q.samples = int(stats.get("samples", {}).get("totalQueryableSamples", 0))
    if "timings" in stats:
        q.server_seconds.append(float(stats["timings"]["evalTotalTime"]))
    elif "trace" in answer:
        q.server_seconds.append(float(answer["trace"]["duration_msec"]) / 1000)


# --- reporting --------------------------------------------------------------------------------
def _table(headers: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def report(fleet: Fleet, groups: list[GroupTiming], queries: list[QueryTiming],
           tsdb: Json) -> tuple[str, float, float]:
    """The printed report and the two acceptance ratios."""
    out = [f"# Fleet benchmark: {' '.join(fleet.notes)}",
           f"head series: {tsdb['headStats']['numSeries']:,}", ""]
    rows = [[g.name, g.file, str(g.rules), str(len(g.seconds)), f"{g.mean_ms:.1f}",
             f"{1000 * max(g.seconds, default=float('nan')):.1f}", f"{g.series:,}"]
            for g in sorted(groups, key=lambda g: -g.mean_ms)]
    out.append(_table(["group", "file", "rules", "evals", "mean ms", "max ms", "series"],
                      rows, {2, 3, 4, 5, 6}))
    slow_rules = sorted(((statistics.fmean(v), name, g.name) for g in groups
                         for name, v in g.rule_seconds.items() if v), reverse=True)[:5]
    out += ["", "slowest rules: " + "; ".join(f"{n} ({grp}) {1000 * s:.1f} ms"
                                               for s, n, grp in slow_rules), ""]
    rows = [[q.dashboard.removeprefix("gpu-"), q.panel[:44], q.ref, q.kind,
             f"{'>' if q.timed_out else ''}{q.median_ms:.1f}", f"{q.series:,}",
             f"{q.samples:,}"]
            for q in sorted(queries, key=lambda q: -q.median_ms)]
    out.append(_table(["dashboard", "panel", "ref", "kind", "median ms", "series", "samples"],
                      rows, {4, 5, 6}))
    means = [g.mean_ms for g in groups if g.seconds]
    medians = [q.median_ms for q in queries if q.seconds]
    group_ratio = max(means) / statistics.median(means)
    query_ratio = max(medians) / statistics.median(medians)
    out += [
        "",
        f"rule groups: slowest {max(means):.1f} ms / median {statistics.median(means):.1f} ms "
        f"= {group_ratio:.1f}x (target <= {GROUP_RATIO_MAX:g}x) "
        f"{'PASS' if group_ratio <= GROUP_RATIO_MAX else 'FAIL'}",
        f"dashboard queries: slowest {max(medians):.1f} ms / median "
        f"{statistics.median(medians):.1f} ms = {query_ratio:.1f}x "
        f"(target <= {QUERY_RATIO_MAX:g}x) {'PASS' if query_ratio <= QUERY_RATIO_MAX else 'FAIL'}",
    ]
    return "\n".join(out), group_ratio, query_ratio


@contextlib.contextmanager
def held(lock: Path | None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock`` (if given) so other benchmarks wait."""
    if lock is None:
        yield
        return
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--live", type=int, metavar="N", help="N live simulated exporters")
    mode.add_argument("--backfill", type=int, metavar="N", help="N backfilled nodes")
    parser.add_argument("--interval", type=float, default=None,
                        help="scrape and evaluation interval in seconds (live 5, backfill 15)")
    parser.add_argument("--minutes", type=float, default=60.0, help="backfilled history")
    parser.add_argument("--warmup", type=float, default=60.0,
                        help="live: seconds of scraping before measuring")
    parser.add_argument("--evaluations", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--query-timeout", type=float, default=60.0,
                        help="seconds after which Prometheus aborts a dashboard query")
    parser.add_argument("--workers", type=int, default=2, help="backfill generator processes")
    parser.add_argument("--lock", type=Path, default=None,
                        help="flock this file while measuring (e.g. a shared bench lock)")
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    parser.add_argument("--rules", type=Path, default=RULES_DIR,
                        help="folder of the rule files to load (default: dashboards/rules)")
    parser.add_argument("--dashboards", type=Path, default=GRAFANA_DIR,
                        help="folder of the dashboard JSON files (default: dashboards/grafana)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when an acceptance ratio is missed")
    args = parser.parse_args(argv)
    # SIGTERM (timeout(1), a killed job) unwinds like Ctrl-C, so every child is stopped.
    signal.signal(signal.SIGTERM, _interrupted)
    deadline = time.monotonic() + args.max_seconds
    rules = sorted(args.rules.glob("*.yaml"))
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as name:
        tmp = Path(name)
        try:
            if args.live is not None:
                interval = args.interval or 5.0
                with held(args.lock), live_fleet(args.live, interval, rules, tmp,
                                                 deadline) as fleet:
                    time.sleep(max(0.0, args.warmup - (time.time() - fleet.data_start)))
                    text, ratios, figures = measure(fleet, args, deadline)
            else:
                interval = args.interval or 15.0
                spec = fleet_data.FleetSpec(args.backfill, time.time(), args.minutes, interval)
                with backfilled_fleet(spec, args.workers, rules, tmp, deadline) as fleet, \
                        held(args.lock):
                    text, ratios, figures = measure(fleet, args, deadline)
        except (BenchError, subprocess.SubprocessError, OSError) as exc:
            print(f"fleet benchmark failed: {exc}", file=sys.stderr)
            return 2
    print(text)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1))
    missed = ratios[0] > GROUP_RATIO_MAX or ratios[1] > QUERY_RATIO_MAX
    return 1 if args.check and missed else 0


def measure(fleet: Fleet, args: argparse.Namespace,
            deadline: float) -> tuple[str, tuple[float, float], Json]:
    """Rule groups, then dashboard queries; the report, the ratios and the raw figures."""
    wait_fresh(fleet, deadline)
    groups = measure_groups(fleet.prometheus, fleet.interval, args.evaluations, deadline)
    end = time.time()
    queries = dashboard_queries(fleet.prometheus.port, sorted(args.dashboards.glob("*.json")),
                                fleet.data_start, end, fleet.interval)
    run_queries(fleet, queries, end, repeats=args.repeats, timeout=args.query_timeout,
                deadline=deadline)
    tsdb = fleet.prometheus.api("/api/v1/status/tsdb")["data"]
    text, group_ratio, query_ratio = report(fleet, groups, queries, tsdb)
    figures = {
        "notes": fleet.notes, "head_series": tsdb["headStats"]["numSeries"],
        "groups": [{"name": g.name, "file": g.file, "mean_ms": g.mean_ms, "series": g.series,
                    "evaluations": len(g.seconds),
                    "rules_ms": {name: 1000 * statistics.fmean(seconds)
                                 for name, seconds in g.rule_seconds.items()}}
                   for g in groups],
        "queries": [{"dashboard": q.dashboard, "panel": q.panel, "ref": q.ref, "kind": q.kind,
                     "median_ms": q.median_ms, "timed_out": q.timed_out, "series": q.series,
                     "samples": q.samples,
                     "expr": q.expr} for q in queries],
        "group_ratio": group_ratio, "query_ratio": query_ratio,
    }
    return text, (group_ratio, query_ratio), figures


if __name__ == "__main__":
    sys.exit(main())
