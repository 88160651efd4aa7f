"""Jobstats' own queries, and ``gpu-exporter report job``/``pod``, against a real Prometheus
scraping the real exporter (simulated ``slurm-node`` with ``--slurm --collector.jobstats``,
simulated ``kubernetes-node`` with ``--kubernetes``) and a site's cgroup exporter (a static
page of Jobstats' ``cgroup_*`` series for one job).

Jobstats' queries (``jobstats.py``: ``avg_over_time((nvidia_gpu_duty_cycle{cluster='C'} and
nvidia_gpu_jobId == J)[Ns:])`` for utilisation, ``max_over_time`` for memory) must give, per
GPU of the job (keyed by ``minor_number``, as Jobstats keys them), the exporter's own figures
over the same window, on exactly the GPUs the job holds; and the summary ``gpu-exporter report
job`` stores for Jobstats must hold the same numbers, plus the cgroup exporter's CPU fields.
"""

from __future__ import annotations

import base64
import datetime
import gzip
import http.server
import json
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from exporter.catalogue import records
from exporter.report.admincomment import PREFIX
from tests.dashboards.live import (
    PROMETHEUS,
    SITE_COST_RULES,
    http_get,
    start_prometheus,
    wait_until,
)
from tests.processes import free_port, stop_all

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not PROMETHEUS.exists(), reason="needs Debian's prometheus package"),
]

ROOT = Path(__file__).resolve().parents[2]
CGROUP_PAGE = """\
cgroup_memory_total_bytes{jobid="913377",step="",task=""} 137438953472
cgroup_memory_rss_bytes{jobid="913377",step="",task=""} 84683702272
cgroup_cpu_total_seconds{jobid="913377",step="",task=""} 5762.5
cgroup_cpus{jobid="913377",step="",task=""} 12
cgroup_cpus{jobid="913377",step="0",task=""} 12
"""
SAMPLES = 12  # scrapes of every exporter before the queries


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = CGROUP_PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class Live:
    prometheus_port: int
    end: float = 0.0

    def query(self, expr: str) -> list[dict[str, object]]:
        params = urllib.parse.urlencode({"query": expr, "time": f"{self.end:.3f}"})
        body = http_get(f"http://127.0.0.1:{self.prometheus_port}/api/v1/query?{params}",
                        timeout=10)[1]
        answer = json.loads(body)
        assert answer["status"] == "success", answer
        result: list[dict[str, object]] = answer["data"]["result"]
        return result

    def by(self, label: str, expr: str) -> dict[str, float]:
        return {r["metric"][label]: float(r["value"][1])  # type: ignore[index]
                for r in self.query(expr)}

    def report(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "exporter", "report", *args, "--prometheus.url",
             f"http://127.0.0.1:{self.prometheus_port}", "--no-slurm", "--step", "1s",
             "--end", f"{self.end:.0f}", "--since", "5m"],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)


def _priced_rules(tmp: Path) -> tuple[Path, ...]:
    """The accounting group and a site's cost group (the example settings' prices), run every
    second (their amounts are then not in real units: the week test checks those)."""
    paths = []
    for source in (ROOT / "dashboards" / "rules" / records.RULE_FILE, SITE_COST_RULES):
        doc = yaml.safe_load(source.read_text())
        for group in doc["groups"]:
            group["interval"] = "1s"
        path = tmp / source.name
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        paths.append(path)
    return tuple(paths)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    tmp = tmp_path_factory.mktemp("jobstats")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    processes: list[subprocess.Popen[bytes]] = []
    ports = {"slurm-node": free_port(), "kubernetes-node": free_port()}
    flags = {"slurm-node": ("--slurm", "--containers", "--collector.jobstats"),
             "kubernetes-node": ("--kubernetes",)}
    try:
        for scenario, port in ports.items():
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "exporter", "--source", "simulated", "--scenario",
                 scenario, *flags[scenario], "--web.listen-address", f"127.0.0.1:{port}",
                 "--log.level", "warning"], cwd=ROOT, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))
        prometheus, prometheus_port = start_prometheus(tmp, [
            {"job_name": "gpu-exporter", "static_configs": [
                {"targets": [f"127.0.0.1:{port}"], "labels": {"cluster": "c1", "scenario": name}}
                for name, port in ports.items()]},
            {"job_name": "cgroup", "static_configs": [
                {"targets": [f"127.0.0.1:{server.server_address[1]}"],
                 "labels": {"cluster": "c1"}}]}],
            deadline=time.monotonic() + 60, rule_files=_priced_rules(tmp))
        processes.append(prometheus)
        state = Live(prometheus_port)

        def scraped() -> bool:
            state.end = float(int(time.time()))  # whole seconds, as the report takes them
            counts = state.query('count_over_time(up{cluster="c1"}[1m])')
            return len(counts) == 3 and all(
                float(r["value"][1]) >= SAMPLES for r in counts)  # type: ignore[index]

        wait_until(f"{SAMPLES} scrapes of every target", scraped, time.monotonic() + 90)
        # Every answer up to ``end`` final before the first report: on a loaded machine a
        # scrape or a rule evaluation of the last second can land between two reports.
        wait_until("scrapes and rule evaluations past the end", lambda: _settled(state),
                   time.monotonic() + 60)
        yield state
    finally:
        stop_all(processes, timeout=10)
        server.shutdown()


def _unix_seconds(stamp: str) -> float:
    """Prometheus' RFC 3339 time (UTC, up to nanoseconds) in seconds."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    moment = datetime.datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S")
    return moment.replace(tzinfo=datetime.timezone.utc).timestamp() + float(f"0.{fraction or 0}")


def _settled(live: Live) -> bool:
    """Whether every target was scraped, and every rule group evaluated, after ``live.end``."""
    base = f"http://127.0.0.1:{live.prometheus_port}/api/v1"
    targets = json.loads(http_get(f"{base}/targets", timeout=10)[1])["data"]["activeTargets"]
    groups = json.loads(http_get(f"{base}/rules", timeout=10)[1])["data"]["groups"]
    stamps = [t["lastScrape"] for t in targets] + [g["lastEvaluation"] for g in groups]
    return bool(groups) and all(_unix_seconds(stamp) > live.end for stamp in stamps)


def _window(live: Live) -> int:
    return SAMPLES - 2  # seconds: within the scrapes every target had


def test_jobstats_utilization_query_gives_the_exporters_figures(live: Live) -> None:
    window = _window(live)
    jobstats = live.by("minor_number", f"avg_over_time((nvidia_gpu_duty_cycle{{cluster='c1'}} "
                       f"and nvidia_gpu_jobId == 913377)[{window}s:])")
    native = live.by("gpu", f"avg_over_time((gpu_utilization_ratio{{cluster='c1'}} and on "
                     f"(instance, uuid) gpu_allocation_info{{slurm_job=\"913377\"}})"
                     f"[{window}s:]) * 100")
    assert sorted(jobstats) == ["0", "1", "2", "3"]  # the job's four GPUs, no other
    for minor, value in jobstats.items():
        assert value == pytest.approx(native[minor], abs=1e-9)
        assert 80 <= value <= 96  # the scenario's 88 % with its jitter
    idle = live.by("minor_number", f"avg_over_time((nvidia_gpu_duty_cycle{{cluster='c1'}} and "
                   f"nvidia_gpu_jobId == 913520)[{window}s:])")
    assert idle == {"7": 0.0}  # the job given GPU 7 that runs nothing


def test_jobstats_memory_queries_and_labels(live: Live) -> None:
    window = _window(live)
    used = live.by("minor_number", f"max_over_time((nvidia_gpu_memory_used_bytes"
                   f"{{cluster='c1'}} and nvidia_gpu_jobId == 913402)[{window}s:])")
    native = live.by("gpu", f"max_over_time(gpu_memory_used_bytes{{cluster='c1', gpu=\"4\", "
                     f"scenario=\"slurm-node\"}}[{window}s:])")
    assert used == {"4": native["4"]}
    assert 20 * 2**30 < used["4"] < 21 * 2**30  # bob's 20 GiB and the driver's reserve
    total = live.by("minor_number", f"max_over_time((nvidia_gpu_memory_total_bytes"
                    f"{{cluster='c1'}} and nvidia_gpu_jobId == 913402)[{window}s:])")
    assert total == {"4": 85899345920.0}
    labels = [r["metric"] for r in live.query('nvidia_gpu_jobId{jobid="913402"}')]
    assert [(m["userid"], m["ordinal"], m["name"]) for m in labels] == [  # type: ignore[index]
        ("2002", "4", "NVIDIA A100-SXM4-80GB")]
    assert live.query('nvidia_gpu_jobId{minor_number="6"}') == []  # the container's GPU


def test_the_stored_summary_holds_jobstats_numbers_and_the_cpu_fields(live: Live) -> None:
    window = _window(live)
    start = live.end - window
    done = live.report("job", "913377", "--start", f"{start:.0f}", "--match", 'cluster="c1"',
                       "--format", "jobstats")
    assert done.returncode == 0, done.stderr
    stored = done.stdout.strip()
    assert stored.startswith(PREFIX)
    doc = json.loads(gzip.decompress(base64.b64decode(stored[len(PREFIX):])))  # as jobstats
    node = doc["nodes"]["127.0.0.1"]
    jobstats = live.by("minor_number", f"avg_over_time((nvidia_gpu_duty_cycle{{cluster='c1'}} "
                       f"and nvidia_gpu_jobId == 913377)[{round(live.end) - round(start)}s:1s])")
    assert node["gpu_utilization"] == {k: round(v, 1) for k, v in jobstats.items()}
    assert set(node["gpu_used_memory"]) == set(node["gpu_total_memory"]) == {"0", "1", "2", "3"}
    assert (node["cpus"], node["total_time"], node["total_memory"], node["used_memory"]) == (
        12, 5762.5, 137438953472, 84683702272)
    assert doc["gpus"] == 4
    assert doc["total_time"] == round(live.end) - round(start)


def test_a_job_given_a_gpu_it_never_uses(live: Live) -> None:
    done = live.report("job", "913520", "--format", "json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    (gpu,) = summary["gpus"]
    assert gpu["gpu"] == "7"
    assert gpu["figures"]["idle_seconds"] == gpu["figures"]["held_seconds"] > 0
    assert "process_memory_peak_bytes" not in gpu["figures"]
    assert [note.split(" ")[0] for note in gpu["notes"]] == ["held"]


def test_a_pod_summary(live: Live) -> None:
    done = live.report("pod", "research/notebook-alice-0")
    assert done.returncode == 0, done.stderr
    assert "Pod research/notebook-alice-0" in done.stdout
    assert "held without use 100% of the time" in done.stdout  # 0 % for hours
    assert live.report("pod", "research/nobody").returncode == 2


def test_a_jobs_summary_says_what_it_cost(live: Live) -> None:
    """With prices, the summary carries the job's cost from the cost records (their amounts
    are checked against a week's ground truth in test_report_cost.py)."""
    done = live.report("job", "913377", "--format", "json")
    assert done.returncode == 0, done.stderr
    cost = json.loads(done.stdout)["cost"]
    assert cost["currency"] == "EUR"
    assert cost["held"] > 0
    assert cost["total"] == cost["held"] + (cost["energy"] or 0.0)
    text = live.report("job", "913377").stdout
    assert f"Cost: held {cost['held']:,.2f} EUR" in text
