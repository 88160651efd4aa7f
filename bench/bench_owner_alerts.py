"""What owner alerts' notices cost Prometheus: rule groups with and without their annotations.

Usage (repository root)::

    .venv/bin/python bench/bench_owner_alerts.py [--interval 5] [--warmup 60] [--samples 6]

Starts the simulated scenarios whose owner alerts fire (a forgotten notebook, pods, Slurm jobs,
PyTorch out-of-memory errors, a leak, starved GPUs) and two Prometheus servers scraping them and
evaluating every ``--interval`` seconds: one with the shipped alert rules, one with the same
rules without annotations (``dashboards/rules/tests/rules/``' form). The rules are generated
with short ``for`` durations so that the alerts, and GpuOwnerAlertUnresolved, are active within
the warm-up. Prints each alert group's mean evaluation time on both, its active alerts, and the
difference per active alert: the cost of the annotations' queries (the owner's processes, idle
times and commands, the number of hosts), paid only while an alert is active.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dashboards import alerts, rules  # noqa: E402
from exporter.catalogue import thresholds  # noqa: E402
from tests.dashboards.live import PROMETHEUS, SCENARIO_FLAGS, http_get, wait_until  # noqa: E402
from tests.processes import free_port, stop_all  # noqa: E402

SCENARIOS = ("shared-workstation", "kubernetes-node", "slurm-node", "torch-memory-pressure",
             "memory-leak", "input-starved")
DURATIONS = {"IDLE_FOR": "10s", "STARVED_FOR": "10s", "LEAK_FOR": "10s",
             "TORCH_RETRIES_FOR": "10s", "OWNER_ESCALATE_AFTER": "20s"}


def _rule_file(folder: Path, annotations: bool) -> Path:
    for name, value in DURATIONS.items():
        setattr(thresholds, name, value)
    path = folder / ("with.yaml" if annotations else "without.yaml")
    path.write_text(rules.render(alerts.groups(), "alerts.py", annotations=annotations))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--interval", type=int, default=5, help="scrape and evaluation, seconds")
    parser.add_argument("--warmup", type=float, default=60.0)
    parser.add_argument("--samples", type=int, default=6, help="evaluations per group")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-owner-alerts-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        targets = []
        for scenario in SCENARIOS:
            port = free_port()
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "exporter", "--source", "simulated", "--scenario",
                 scenario, "--collector.torch", *SCENARIO_FLAGS.get(scenario, ()),
                 "--web.listen-address", f"127.0.0.1:{port}", "--log.level", "warning"],
                cwd=ROOT))
            targets.append(f"127.0.0.1:{port}")
        servers: dict[str, str] = {}
        for kind, annotations in (("with", True), ("without", False)):
            config = {"global": {"scrape_interval": f"{args.interval}s",
                                 "evaluation_interval": f"{args.interval}s"},
                      "rule_files": [str(_rule_file(tmp, annotations))],
                      "scrape_configs": [{"job_name": "gpu-exporter",
                                          "static_configs": [{"targets": targets}]}]}
            (tmp / f"{kind}.yml").write_text(yaml.safe_dump(config))
            port = free_port()
            processes.append(subprocess.Popen(
                [str(PROMETHEUS), f"--config.file={tmp / f'{kind}.yml'}",
                 f"--storage.tsdb.path={tmp / f'tsdb-{kind}'}",
                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]))
            servers[kind] = f"http://127.0.0.1:{port}"
        for base in servers.values():
            wait_until("Prometheus", lambda b=base: http_get(b + "/-/ready")[0] == 200,
                       time.monotonic() + 60)
        time.sleep(args.warmup)
        seen: dict[tuple[str, str], dict[str, float]] = {}
        active: dict[tuple[str, str], int] = {}
        deadline = time.monotonic() + args.interval * (args.samples + 2)
        while time.monotonic() < deadline:
            for kind, base in servers.items():
                _, body = http_get(base + "/api/v1/rules", timeout=10)
                for group in json.loads(body)["data"]["groups"]:
                    key = (kind, group["name"])
                    seen.setdefault(key, {})[group["lastEvaluation"]] = (
                        group["evaluationTime"] * 1000)
                    active[key] = sum(len(r.get("alerts", [])) for r in group["rules"])
            time.sleep(1.0)
        print(f"{'group':22} {'with ms':>8} {'without':>8} {'alerts':>6} {'ms/alert':>8}")
        for group in [g.name for g in alerts.groups()]:
            with_ms = statistics.mean(seen[("with", group)].values())
            without_ms = statistics.mean(seen[("without", group)].values())
            count = active[("with", group)]
            per = f"{(with_ms - without_ms) / count:8.2f}" if count else f"{'-':>8}"
            print(f"{group:22} {with_ms:8.2f} {without_ms:8.2f} {count:6d} {per}")
    finally:
        stop_all(processes, timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
