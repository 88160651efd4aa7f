"""A real Prometheus holding a week of backfilled exporter data and its accounting records.

Raw samples: the scenario as OpenMetrics, one file per day, through ``promtool tsdb
create-blocks-from openmetrics`` (promtool re-reads its whole input once per 2-hour block, so
one week-long file would take ~30 s instead of ~5 s). Recorded series: the rule group's own
expressions evaluated by this Prometheus every interval over the week (one range query per
rule, what ``promtool tsdb create-blocks-from rules`` does per 2-hour block, ~50x faster),
backfilled the same way. Rules that read other rules' output are evaluated after those are
loaded (one round per dependency depth, Prometheus restarted to pick the blocks up).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.processes import free_port, stop_all

PROMETHEUS = Path("/usr/bin/prometheus")
PROMTOOL = Path("/usr/bin/promtool")
DAY = 86400


def create_blocks(files: Iterable[Path], tsdb: Path) -> None:
    """Backfill OpenMetrics files into ``tsdb`` (two promtool runs at a time).

    Raises:
        RuntimeError: promtool failed.
    """
    def one(path: Path) -> None:
        result = subprocess.run(
            [str(PROMTOOL), "tsdb", "create-blocks-from", "openmetrics", "-q", str(path),
             str(tsdb)], capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"promtool failed on {path.name}: {result.stderr[-1500:]}")

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(one, files))


def rule_depths(rules: list[dict[str, Any]]) -> dict[str, int]:
    """Record name -> 1 + the depth of the records its expression reads (in file order)."""
    depth: dict[str, int] = {}
    for rule in rules:
        reads = [d for name, d in depth.items()
                 if re.search(re.escape(name) + r"(?![a-z_0-9:])", rule["expr"])]
        depth[rule["record"]] = 1 + max(reads, default=0)
    return depth


@dataclass
class Prometheus:
    """One Prometheus process on a TSDB folder, restartable, 127.0.0.1 only."""

    tmp: Path
    rule_file: Path | None = None
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    restarts: int = field(default=0)

    @property
    def tsdb(self) -> Path:
        return self.tmp / "tsdb"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        """Start (or restart) it and wait until it is ready.

        Raises:
            RuntimeError: it exited or did not get ready in time.
        """
        self.stop()
        config: dict[str, Any] = {"global": {"evaluation_interval": "1m"}}
        if self.rule_file is not None:
            config["rule_files"] = [str(self.rule_file)]
        (self.tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        log = self.tmp / "prometheus.log"
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [str(PROMETHEUS), f"--config.file={self.tmp / 'prometheus.yml'}",
                 f"--storage.tsdb.path={self.tsdb}", "--storage.tsdb.retention.time=60d",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited: {log.read_text()[-1500:]}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("prometheus did not get ready")

    def stop(self) -> None:
        if self.process is not None:
            stop_all([self.process], timeout=10)
            self.process = None

    def api(self, path: str, **params: str) -> Any:
        body = urllib.parse.urlencode(params).encode()
        with urllib.request.urlopen(self.url + path, data=body, timeout=60) as answer:
            doc = json.loads(answer.read())
        assert doc["status"] == "success", doc
        return doc["data"]

    def evaluate_rules(self, rules: list[dict[str, Any]], start: float, end: float,
                       step: int, work: Path) -> int:
        """Evaluate recording rules every ``step`` s over ``[start, end]`` and backfill their
        output, depth by depth; returns the number of recorded samples."""
        depths = rule_depths(rules)
        samples = 0
        for depth in sorted(set(depths.values())):
            todo = [r for r in rules if depths[r["record"]] == depth]
            by_day: dict[int, list[str]] = {}
            for rule in todo:
                lines: dict[int, list[str]] = {}
                result = self.api("/api/v1/query_range", query=rule["expr"],
                                  start=f"{start:.0f}", end=f"{end:.0f}", step=str(step))
                for series in result["result"]:
                    # The rule's own labels overwrite the expression's, as Prometheus does.
                    metric = {**series["metric"], **rule.get("labels", {})}
                    labels = ",".join(f'{k}="{v}"' for k, v in sorted(metric.items())
                                      if k != "__name__")
                    for at, value in series["values"]:
                        day = int((at - start) // DAY)
                        lines.setdefault(day, []).append(
                            f"{rule['record']}{{{labels}}} {value} {at}\n")
                        samples += 1
                for day, day_lines in lines.items():
                    by_day.setdefault(day, []).extend(
                        [f"# TYPE {rule['record']} gauge\n", *day_lines])
            files = []
            for day, day_lines in by_day.items():
                path = work / f"rules-{depth}-{day}.om"
                path.write_text("".join(day_lines) + "# EOF\n")
                files.append(path)
            create_blocks(files, self.tsdb)
            self.start()  # pick the new blocks up
            self.restarts += 1
        return samples
