"""Cost of the idle-accounting rule group (and of the cost group a site's prices add) next to
the other rule groups, on a real Prometheus.

Usage (repository root)::

    .venv/bin/python bench/bench_accounting_rules.py [--nodes 6] [--warmup 45] \
        [--settings dashboards/settings.example.yaml]

Starts ``--nodes`` simulated exporters (``synthetic:8x32``: 8 GPUs and 256 processes each,
half of them in pods) and a Prometheus scraping and evaluating every 5 s with every rule file of
``dashboards/rules/`` plus the accounting group and the cost group of ``--settings`` (both run
every 5 s here instead of every minute, so that several evaluations are seen; the cost of one
evaluation does not depend on the interval).
Prints each group's mean evaluation time over the evaluations seen after ``--warmup`` seconds,
with the number of rules and of series it records. Run under ``flock /work/coord/bench.lock``
on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dashboards import cost, rules, settings  # noqa: E402
from exporter.catalogue import records  # noqa: E402
from tests.dashboards.live import PROMETHEUS, http_get, wait_until  # noqa: E402
from tests.processes import free_port, stop_all  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=6)
    parser.add_argument("--warmup", type=float, default=45.0)
    parser.add_argument("--samples", type=int, default=4, help="evaluations per group")
    parser.add_argument("--settings", type=Path, default=ROOT / "dashboards" /
                        "settings.example.yaml", help="the prices and teams of the cost group")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-accounting-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        targets = []
        for node in range(args.nodes):
            port = free_port()
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "exporter", "--source", "simulated", "--scenario",
                 "synthetic:8x32", "--hostname", f"node{node:03d}", "--simulate.seed",
                 str(node), "--web.listen-address", f"127.0.0.1:{port}",
                 "--log.level", "warning"], cwd=ROOT))
            targets.append(f"127.0.0.1:{port}")
        doc = yaml.safe_load((ROOT / "dashboards" / "rules" / records.RULE_FILE).read_text())
        doc["groups"][0]["interval"] = "5s"
        (tmp / records.RULE_FILE).write_text(yaml.safe_dump(doc))
        priced = yaml.safe_load(rules.render(cost.groups(settings.load(args.settings)),
                                             "cost.py"))
        for group in priced["groups"]:
            group["interval"] = "5s"
        (tmp / records.COST_RULE_FILE).write_text(yaml.safe_dump(priced))
        rule_files = [*sorted(str(p) for p in (ROOT / "dashboards" / "rules").glob("*.yaml")
                              if p.name != records.RULE_FILE), str(tmp / records.RULE_FILE),
                      str(tmp / records.COST_RULE_FILE)]
        config = {"global": {"scrape_interval": "5s", "evaluation_interval": "5s"},
                  "rule_files": rule_files,
                  "scrape_configs": [{"job_name": "gpu-exporter",
                                      "static_configs": [{"targets": targets}]}]}
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        processes.append(subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
             "--log.level=warn"]))
        base = f"http://127.0.0.1:{port}"
        wait_until("Prometheus", lambda: http_get(base + "/-/ready")[0] == 200,
                   time.monotonic() + 60)
        time.sleep(args.warmup)
        seen: dict[str, dict[str, float]] = {}
        deadline = time.monotonic() + 5 * (args.samples + 2)
        info: dict[str, tuple[int, int]] = {}
        per_rule: dict[str, list[float]] = {}
        while time.monotonic() < deadline:
            groups = json.loads(http_get(base + "/api/v1/rules")[1])["data"]["groups"]
            for group in groups:
                seen.setdefault(group["name"], {})[group["lastEvaluation"]] = float(
                    group["evaluationTime"])
                info[group["name"]] = (len(group["rules"]), 0)
                if group["name"] in (records.GROUP, records.COST_GROUP):
                    for rule in group["rules"]:
                        per_rule.setdefault(rule["name"], []).append(
                            float(rule["evaluationTime"]) * 1000)
            time.sleep(1.0)
        query = urllib.parse.quote('count({__name__=~".+"})')
        series = json.loads(http_get(f"{base}/api/v1/query?query={query}")[1])
        total = int(float(series["data"]["result"][0]["value"][1]))
        print(f"{args.nodes} nodes x synthetic:8x32 ({args.nodes * 256} processes), "
              f"{total} series in Prometheus")
        print(f"{'group':42} {'rules':>5} {'evals':>5} {'mean ms':>8} {'max ms':>8}")
        means = {}
        for name, evals in sorted(seen.items()):
            values = [v * 1000 for v in evals.values()]
            means[name] = statistics.fmean(values)
            print(f"{name:42} {info[name][0]:5d} {len(values):5d} {means[name]:8.1f} "
                  f"{max(values):8.1f}")
        for name, times in sorted(per_rule.items(), key=lambda kv: -statistics.fmean(kv[1])):
            print(f"  {name:56} {statistics.fmean(times):8.1f} ms")
        median = statistics.median(means.values())
        print(f"accounting / median group: {means[records.GROUP] / median:.1f}x, "
              f"cost / median group: {means.get(records.COST_GROUP, 0.0) / median:.1f}x "
              f"(median {median:.1f} ms)")
    finally:
        stop_all(processes, timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
