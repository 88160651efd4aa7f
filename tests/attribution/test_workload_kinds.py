"""Every workload kind row reaches every output it should, and a new kind is one row and one
parser (``docs/adding-a-workload-kind.md``).

For each row of ``exporter.catalogue.workloads.KINDS``: its flag, its labels on process,
per-workload and accounting series (through the simulated source and the exporter's own
accounting), its cgroup layouts, its recording rule and dashboard variables. Then a toy kind
(PBS jobs, ``tests.attribution.toy_kind``), added by one row and one parser and nothing else,
is seen by the real exporter reading a fake /proc, by the generator and by the simulator.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from exporter.attribution.accounting import IdleAccounting
from exporter.attribution.workloads import WorkloadLabels
from exporter.catalogue import metrics
from exporter.catalogue.metrics.core import PROCESS_LABELS
from exporter.catalogue.workloads import KINDS, WorkloadKind, identify
from exporter.cli import parse_config
from exporter.config import FLAGS
from exporter.exposition import snapshot_families
from exporter.exposition.encode import Encoder
from exporter.snapshot import Workload
from exporter.sources.simulated.scenario import parse_scenario
from exporter.sources.simulated.source import SimulatedSource
from tests.attribution import toy_kind
from tests.e2e.server import ExporterProcess
from tests.exposition.parse import series
from tests.fixtures.cgroup_layouts import CASES
from tests.fixtures.fakeproc import write_boot, write_process

ROOT = Path(__file__).resolve().parents[2]
PASSWD = ROOT / "tests" / "fixtures" / "host_passwd"
TEXT = "text/plain; version=0.0.4; charset=utf-8"
LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
COUNTER = metrics.ACCOUNTING_ROWS[0].name


def _name(kind: WorkloadKind) -> str:
    return kind.name


def _metrics(scenario: dict[str, Any], *flags: str) -> str:
    """/metrics text of ``scenario`` on the simulated source, accounted over two collections
    as the CLI chains it, with ``flags``."""
    config = parse_config(["--source", "simulated", "--scenario", "x", *flags], {})
    now = [1_000.0]
    source = SimulatedSource(parse_scenario(scenario, "x.yaml"), clock=lambda: now[0])
    accounting = IdleAccounting(config.workload_labels)
    accounting.enrich(source.collect(config.collect_groups()))
    now[0] += 10.0
    snapshot = accounting.enrich(source.collect(config.collect_groups()))
    return Encoder(TEXT).encode(snapshot_families(snapshot, config.exposition_options()))


def _workload_scenario(kind: WorkloadKind) -> dict[str, Any]:
    """One GPU: a process in a workload of ``kind`` (every label set) and a host process."""
    labels = {label: f"{kind.name}-{label}" for label in kind.labels}
    processes = [{"gpu": 0, "user": "alice", "memory": "2GiB", "utilization": 0.5,
                  "workload": {"kind": kind.name, **labels}},
                 {"gpu": 0, "user": "bob", "memory": "1GiB"}]
    return {"gpus": [{"model": "NVIDIA H200"}], "processes": processes}


@pytest.mark.parametrize("kind", KINDS, ids=_name)
def test_the_flag_follows_the_row(kind: WorkloadKind) -> None:
    (flag,) = [f for f in FLAGS if f.name == kind.name]
    assert (flag.is_bool, flag.default, flag.help) == (True, False, kind.help)
    assert f"| `--[no-]{kind.name}` |" in (ROOT / "docs" / "flags.md").read_text(encoding="utf-8")
    assert parse_config([f"--{kind.name}"], {}).workload_labels.kinds == (kind,)
    environment = {flag.env: "true"}
    assert parse_config([], environment).workload_labels.kinds == (kind,)


@pytest.mark.parametrize("kind", KINDS, ids=_name)
def test_labels_are_label_names_that_clash_with_no_other(kind: WorkloadKind) -> None:
    assert kind.labels
    assert all(LABEL.match(label) for label in kind.labels)
    assert not any(label.startswith("__") for label in kind.labels)
    assert not set(kind.labels) & {*PROCESS_LABELS, "user"}
    assert set(kind.group_by) <= set(kind.labels)
    with pytest.raises(ValueError, match="group_by"):
        WorkloadKind("bad", "", ("a",), kind.match, group_by=("b",))


@pytest.mark.parametrize("kind", KINDS, ids=_name)
def test_labels_reach_process_workload_and_accounting_series(kind: WorkloadKind) -> None:
    scenario = _workload_scenario(kind)
    text = _metrics(scenario, f"--{kind.name}")
    want = {label: f"{kind.name}-{label}" for label in kind.labels}
    processes = {s["user"]: s for s in series(text, metrics.PROCESS_MEMORY.name)}
    assert {k: processes["alice"][k] for k in want} == want
    assert {processes["bob"][k] for k in want} == {""}  # a host process: empty labels
    (workload,) = series(text, metrics.WORKLOAD_MEMORY.name)  # host processes are in none
    assert {k: workload[k] for k in want} == want
    (utilization,) = series(text, metrics.WORKLOAD_UTILIZATION.name)
    assert {k: utilization[k] for k in want} == want
    accounted = {s["user"]: s for s in series(text, COUNTER)}
    assert set(accounted["alice"]) == {"user", *kind.group_by}
    assert {k: accounted["alice"][k] for k in kind.group_by} == {k: want[k] for k in kind.group_by}
    off = _metrics(scenario)  # the kind switched off: none of its labels anywhere
    names = {label for s in series(off, metrics.PROCESS_MEMORY.name) for label in s}
    assert not names & set(kind.labels)
    assert series(off, metrics.WORKLOAD_MEMORY.name) == []


@pytest.mark.parametrize("kind", KINDS, ids=_name)
def test_its_cgroup_layouts_have_fixtures(kind: WorkloadKind) -> None:
    found = [case for case, text, expected in CASES
             if expected is not None and expected.kind == kind.name]
    assert found, f"{kind.name}: no fixture in tests/fixtures/cgroup_layouts.py"
    for case, text, expected in CASES:
        if expected is not None and expected.kind == kind.name:
            assert identify(text) == expected, case


@pytest.mark.parametrize("kind", KINDS, ids=_name)
def test_rules_and_dashboard_variables_follow_group_by(kind: WorkloadKind) -> None:
    rules = (ROOT / "dashboards" / "rules" / "gpu-exporter-recording.yaml").read_text()
    board = json.loads((ROOT / "dashboards" / "grafana" / "gpu-workloads.json").read_text())
    variables = {v["name"] for v in board["templating"]["list"]}
    record = f"{'_'.join(kind.group_by)}:{metrics.WORKLOAD_MEMORY.name}:sum"
    assert (f"record: {record}\n" in rules) == bool(kind.group_by)
    assert set(kind.group_by) <= variables


def _kind(name: str, *labels: str) -> WorkloadKind:
    return WorkloadKind(name, "", labels, lambda components: None, group_by=labels[-1:])


def test_label_values_for_any_mix_of_kinds() -> None:
    """Each series gets the values of its own kind's labels, "" for the rest, whatever kinds
    are on together (shared labels, labels apart in the union, a workload missing one)."""
    toys = (_kind("a", "x", "y"), _kind("b", "y", "z"), _kind("c", "w"), _kind("d", "x", "v"))
    for size in range(1, len(toys) + 1):
        for on in itertools.combinations(toys, size):
            workload_labels = WorkloadLabels(on)
            for kind in toys:
                full = {label: f"{kind.name}-{label}" for label in kind.labels}
                for labels in (full, dict(list(full.items())[:1])):
                    workload = Workload(kind.name, labels)
                    want = tuple(labels.get(name, "") if kind in on else ""
                                 for name in workload_labels.names)
                    assert workload_labels.values(workload) == want, (on, kind, labels)
                    group = tuple(labels.get(name, "") if kind in on else ""
                                  for name in workload_labels.group_by)
                    assert workload_labels.group_values(workload) == group
            assert workload_labels.values(None) == ("",) * len(workload_labels.names)


# --- a toy kind: one row and one parser ----------------------------------------------------------
TOY_JOB = "1234.pbs-server"


@pytest.mark.slow
def test_a_toy_kind_added_by_one_row_is_read_from_cgroups_by_the_real_exporter(
        tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    write_boot(proc)
    write_process(proc, toy_kind.PID, uid=1001, comm="python", start_ticks=10,
                  cgroup=f"12:memory:/pbs_jobs.service/jobid/{TOY_JOB}\n0::/\n")
    args = ("--source", "nvml", "--pbs", "--procfs", str(proc), "--passwd-file", str(PASSWD),
            "--collector.min-interval", "0")
    with ExporterProcess(*args, module="tests.attribution.toy_kind") as server:
        httpx.get(server.url("/metrics"))  # the first collection opens the accounting rows
        text = httpx.get(server.url("/metrics"), headers={"Accept": TEXT}).text
    (process,) = series(text, metrics.PROCESS_MEMORY.name)
    assert (process["pid"], process["user"], process["pbs_job"]) == (
        str(toy_kind.PID), "alice", TOY_JOB)
    (workload,) = series(text, metrics.WORKLOAD_MEMORY.name)
    assert workload["pbs_job"] == TOY_JOB
    accounted = series(text, COUNTER)
    assert accounted == [{"user": "alice", "pbs_job": TOY_JOB}]


@pytest.mark.slow
def test_a_toy_kind_added_by_one_row_reaches_the_generator_and_the_simulator(
        tmp_path: Path) -> None:
    scenario = tmp_path / "pbs.yaml"
    scenario.write_text(json.dumps({  # JSON is YAML
        "gpus": [{"model": "NVIDIA H200"}],
        "processes": [{"gpu": 0, "user": "alice", "memory": "2GiB", "utilization": 0.5,
                       "workload": {"kind": "pbs", "pbs_job": TOY_JOB}}],
    }))
    done = subprocess.run([sys.executable, "-m", "tests.attribution.toy_kind", "outputs",
                           str(scenario)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=True)
    out = json.loads(done.stdout)
    assert "| `--[no-]pbs` | `GPU_EXPORTER_PBS` | `false` |" in out["flag_table"]
    assert out["kinds"] == ["pbs"]
    assert out["workload_labels"][-1] == "pbs_job"
    assert out["accounting_labels"][-1] == "pbs_job"
    record = f"pbs_job:{metrics.WORKLOAD_MEMORY.name}:sum"
    assert out["records"][record] == (
        "sum without (gpu, uuid, namespace, pod, container, container_id, slurm_job) "
        f'({metrics.WORKLOAD_MEMORY.name}{{pbs_job!=""}})')
    # the other kinds' records drop the new label, so its workloads are not split out there
    assert "pbs_job" in out["records"][f"slurm_job:{metrics.WORKLOAD_MEMORY.name}:sum"]
    per_user = [e for e in out["accounting_exprs"] if "!=" not in e]  # rows of any workload
    assert per_user
    assert all(e.startswith("sum without (namespace, pod, slurm_job, pbs_job) ")
               for e in per_user)
    assert "pbs_job" in out["variables"]
    text = out["metrics"]
    assert series(text, metrics.PROCESS_MEMORY.name)[0]["pbs_job"] == TOY_JOB
    assert series(text, metrics.WORKLOAD_MEMORY.name)[0]["pbs_job"] == TOY_JOB
    assert series(text, COUNTER) == [{"user": "alice", "pbs_job": TOY_JOB}]
