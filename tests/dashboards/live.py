"""A real Prometheus scraping real simulated exporters, for the live dashboard and alert tests.

Everything binds 127.0.0.1 on free ports, lives in a temporary folder and is bounded in time;
``Stack.close`` stops every process this module started.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from exporter.sources.simulated.scenario import load_scenario
from tests.dashboards.grafana import Json, variables
from tests.processes import free_port, stop_all

PROMETHEUS = Path("/usr/bin/prometheus")
ROOT = Path(__file__).resolve().parents[2]
RULE_FILES = sorted((ROOT / "dashboards" / "rules").glob("*.yaml"))
JOB = "gpu-exporter"
#: Concrete values for Grafana's interval variables (scrape interval 1 s).
GRAFANA_BUILTINS = {"__rate_interval": "15s", "__interval": "5s", "__range": "1m"}
_LABEL_VALUES = re.compile(r"^label_values\((?:(.*),\s*)?(\w+)\)$", re.S)
_REGEX_SPECIAL = re.compile(r"[\\^$*+?.()|{}\[\]]")



#: A site's cost group, from the example settings' prices (every model priced): with it the
#: efficiency dashboard's cost row has data.
SITE_COST_RULES = ROOT / "dashboards" / "rules" / "tests" / "rules" / "gpu-exporter-cost.yaml"


def live_rule_files(tmp: Path, extra: tuple[Path, ...] = ()) -> list[str]:
    """The rule files (and ``extra`` ones), with groups that fix their own interval (idle
    accounting and cost: 1m) set to run every second like the rest, so their records exist
    within a short test (their range totals are then not in real units; these tests do not
    read them)."""
    paths = []
    for path in (*RULE_FILES, *extra):
        doc = yaml.safe_load(path.read_text())
        if any("interval" in group for group in doc["groups"]):
            for group in doc["groups"]:
                group["interval"] = "1s"
            copy = tmp / path.name
            copy.write_text(yaml.safe_dump(doc, sort_keys=False))
            paths.append(str(copy))
        else:
            paths.append(str(path))
    return paths


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """(status, body) of a GET; status 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, b""


def wait_until(what: str, check: Any, deadline: float, interval: float = 0.25) -> None:
    """Poll ``check()`` until it is truthy.

    Raises:
        TimeoutError: ``deadline`` (a ``time.monotonic`` value) passed first.
    """
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(interval)


def start_prometheus(tmp: Path, scrape_configs: list[dict[str, Any]],
                     deadline: float, rule_files: tuple[Path, ...] = ()
                     ) -> tuple[subprocess.Popen[bytes], int]:
    """A Prometheus scraping and evaluating every second, with ``scrape_configs`` (and
    ``rule_files``), its data in ``tmp``; returns it and its port once it is ready.

    Raises:
        RuntimeError: it exited.
        TimeoutError: it was not ready before the deadline.
    """
    port = free_port()
    config = tmp / "prometheus-scrape.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                   "scrape_timeout": "900ms"},
        "scrape_configs": scrape_configs,
        **({"rule_files": [str(path) for path in rule_files]} if rule_files else {})}))
    log = tmp / "prometheus-scrape.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=out, stderr=subprocess.STDOUT)

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(log.read_text()[-2000:])
        return http_get(f"http://127.0.0.1:{port}/-/ready", timeout=1.0)[0] == 200

    try:
        wait_until("Prometheus ready", ready, deadline)
    except BaseException:
        stop_all([process], timeout=5)
        raise
    return process, port


@dataclass
class Exporter:
    """One ``python -m exporter --source simulated`` process."""

    scenario: str
    speed: float
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    ready_at: float = 0.0  # Unix time its /healthz first answered

    @property
    def url(self) -> str:
        """Its base URL."""
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Stack:
    """Prometheus plus one exporter per scenario, all started by this test run."""

    tmp: Path
    exporters: dict[str, Exporter] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)  # scenario -> its exporter's port
    dead_port: int = 0
    prometheus: subprocess.Popen[bytes] | None = None
    prometheus_port: int = 0

    def reserve_ports(self, scenarios: Iterable[str]) -> None:
        """Choose each scenario's port (before Prometheus starts, so that it scrapes every
        exporter from its first second)."""
        for scenario in scenarios:
            self.ports.setdefault(scenario, free_port())

    def start_exporters(self, speeds: Mapping[str, float]) -> None:
        """Launch one exporter per scenario (all at once; they start in parallel)."""
        self.reserve_ports(speeds)
        for scenario, speed in speeds.items():
            port = self.ports[scenario]
            log = self.tmp / f"exporter-{scenario}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    [sys.executable, "-m", "exporter", "--source", "simulated",
                     "--scenario", scenario, "--simulate.speed", str(speed), "--collector.torch",
                     *load_scenario(scenario).exporter_flags,  # as the scenario says to
                     "--web.listen-address", f"127.0.0.1:{port}", "--log.level", "warning"],
                    cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                )
            self.exporters[scenario] = Exporter(scenario, speed, port, process, log)

    def wait_exporters(self, deadline: float) -> None:
        """Wait until every exporter answers /healthz, recording when each did.

        Raises:
            RuntimeError: an exporter exited (its log is in the message).
            TimeoutError: the deadline passed.
        """
        pending = dict(self.exporters)
        while pending:
            for name, exp in list(pending.items()):
                if exp.process.poll() is not None:
                    raise RuntimeError(f"exporter {name} exited:\n{exp.log.read_text()[-2000:]}")
                if http_get(exp.url + "/healthz", timeout=1.0)[0] == 200:
                    exp.ready_at = time.time()
                    del pending[name]
            if pending and time.monotonic() > deadline:
                raise TimeoutError(f"exporters not answering: {sorted(pending)}")
            time.sleep(0.1)

    def start_prometheus(self, deadline: float, *, rule_files: list[str] | None = None,
                         alertmanager: str | None = None, dead_target: bool = True) -> None:
        """Write the config (1 s scrape and evaluation, our rules or ``rule_files``, alerts
        sent to the ``alertmanager`` host:port if given) and start Prometheus.

        Raises:
            RuntimeError: Prometheus exited.
            TimeoutError: it did not become ready before the deadline.
        """
        static = [
            {"targets": [f"127.0.0.1:{port}"], "labels": {"scenario": scenario}}
            for scenario, port in self.ports.items()
        ]
        if dead_target:  # a target nothing listens on: the exporter-down alert must see it
            self.dead_port = free_port()
            static.append({"targets": [f"127.0.0.1:{self.dead_port}"],
                           "labels": {"scenario": "down"}})
        config: dict[str, Any] = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                       "scrape_timeout": "900ms"},
            "rule_files": live_rule_files(self.tmp) if rule_files is None else rule_files,
            "scrape_configs": [{"job_name": JOB, "static_configs": static}],
        }
        if alertmanager is not None:
            config["alerting"] = {"alertmanagers": [
                {"static_configs": [{"targets": [alertmanager]}]}]}
        config_file = self.tmp / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config))
        self.prometheus_port = free_port()
        log = (self.tmp / "prometheus.log").open("wb")
        self.prometheus = subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={config_file}",
             f"--storage.tsdb.path={self.tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.prometheus_port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()

        def ready() -> bool:
            if self.prometheus is not None and self.prometheus.poll() is not None:
                raise RuntimeError((self.tmp / "prometheus.log").read_text()[-2000:])
            return http_get(self.api_base + "/-/ready", timeout=1.0)[0] == 200

        wait_until("Prometheus ready", ready, deadline)

    @property
    def api_base(self) -> str:
        """Prometheus's base URL."""
        return f"http://127.0.0.1:{self.prometheus_port}"

    def api(self, path: str, **params: str | float | list[str]) -> Json:
        """GET a Prometheus API path; returns the decoded JSON (also for 4xx answers)."""
        query = urllib.parse.urlencode(params, doseq=True)
        status, body = http_get(f"{self.api_base}{path}?{query}", timeout=10.0)
        if status == 0:
            raise ConnectionError(f"Prometheus did not answer {path}")
        data: Json = json.loads(body)
        return data

    def query(self, expr: str, at: float) -> Json:
        """An instant query at Unix time ``at``."""
        return self.api("/api/v1/query", query=expr, time=at)

    def query_range(self, expr: str, start: float, end: float, step: float = 2.0) -> Json:
        """A range query."""
        return self.api("/api/v1/query_range", query=expr, start=start, end=end, step=step)

    def wait_scraped_past(self, at: float, deadline: float) -> None:
        """Until Prometheus has scraped every target at or after Unix time ``at`` (so that
        queries at ``at`` see complete data, however slowly this machine runs)."""

        def done() -> bool:
            answer = self.query(f'min(timestamp(up{{job="{JOB}"}}))', time.time())
            result = answer["data"]["result"] if answer["status"] == "success" else []
            return bool(result) and float(result[0]["value"][1]) >= at

        wait_until(f"Prometheus scraping past {at:.0f}", done, deadline)

    def close(self) -> None:
        """Stop everything this stack started (terminate, then kill after 5 s)."""
        processes = [e.process for e in self.exporters.values()]
        if self.prometheus is not None:
            processes.append(self.prometheus)
        stop_all(processes, timeout=5)


def regex_value(values: list[str]) -> str:
    """Grafana's formatting of a multi-value/All variable for Prometheus: ``(a|b)``, escaped."""
    escaped = [_REGEX_SPECIAL.sub(lambda m: "\\\\" + m.group(0), v) for v in values]
    return "(" + "|".join(escaped) + ")"


def substitute(text: str, values: Mapping[str, str]) -> str:
    """Replace ``$name`` and ``${name}`` references (longest names first)."""
    for name in sorted(values, key=len, reverse=True):
        text = text.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    return text


def label_values(stack: Stack, query: str, start: float, end: float) -> list[str]:
    """Evaluate a ``label_values(selector, label)`` variable query the way Grafana does.

    Raises:
        ValueError: the query is not a label_values() call, or Prometheus rejected it.
    """
    match = _LABEL_VALUES.match(query.strip())
    if match is None:
        raise ValueError(f"unsupported variable query {query!r}")
    selector, label = match.group(1), match.group(2)
    if selector is None:
        answer = stack.api(f"/api/v1/label/{label}/values", start=start, end=end)
        if answer["status"] != "success":
            raise ValueError(f"{query}: {answer}")
        return sorted(answer["data"])
    answer = stack.api("/api/v1/series", **{"match[]": [selector]}, start=start, end=end)
    if answer["status"] != "success":
        raise ValueError(f"{query}: {answer.get('error')}")
    return sorted({series[label] for series in answer["data"] if label in series})


def resolve_variables(
    stack: Stack, board: Json, start: float, end: float, pick: Mapping[str, str] | None = None,
    *, empty: str | None = None,
) -> dict[str, str]:
    """Values for every variable, in dashboard order: All for multi ones, ``pick`` or the
    first option for single ones; Grafana's interval variables get concrete ranges.
    A variable without options takes ``empty`` when given (Grafana's "None" is "").

    Raises:
        ValueError: a variable has no options (nothing to show) and ``empty`` is None.
    """
    values: dict[str, str] = dict(GRAFANA_BUILTINS)
    for var in variables(board):
        if var["type"] == "datasource":
            continue
        options = label_values(stack, substitute(var["query"], values), start, end)
        if not options and empty is not None:
            values[var["name"]] = empty
            continue
        if not options:
            raise ValueError(f"variable {var['name']} has no options")
        if var.get("multi") or var.get("includeAll"):
            values[var["name"]] = regex_value(options)
        else:
            # Single values are not regex-escaped by Grafana (only quotes and backslashes).
            values[var["name"]] = (pick or {}).get(var["name"], options[0])
    return values


def series_by_scenario(answer: Json) -> dict[str, set[str]]:
    """scenario label -> the ``gpu`` labels (or "" when none) of an instant query's result."""
    found: dict[str, set[str]] = {}
    for series in answer["data"]["result"]:
        metric = series["metric"]
        found.setdefault(metric.get("scenario", "?"), set()).add(metric.get("gpu", ""))
    return found
