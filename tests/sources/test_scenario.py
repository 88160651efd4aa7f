"""Scenario YAML: presets load, the format's values parse, and every bad input is one clear line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exporter.snapshot import ProcessType
from exporter.sources.simulated import scenario as sc
from exporter.sources.simulated.scenario import ScenarioError, load_scenario, parse_scenario

REQUIRED_PRESETS = ("shared-workstation", "training-node", "memory-leak", "overheating",
                    "kubernetes-node", "calm")
PRESET_DIR = Path(sc.__file__).parent / "scenarios"


def _base(**processes: Any) -> dict[str, Any]:
    proc = {"gpu": 0, "user": "alice", "memory": "1GiB", **processes}
    return {"gpus": [{"model": "NVIDIA H100 80GB HBM3"}], "processes": [proc]}


def test_required_presets_are_bundled() -> None:
    presets = sc.list_presets()
    assert set(REQUIRED_PRESETS) <= set(presets)
    assert "input-starved" in presets
    assert presets == sorted(presets)


@pytest.mark.parametrize("name", sc.list_presets())
def test_each_preset_loads_and_documents_its_alerts(name: str) -> None:
    scenario = load_scenario(name)
    assert scenario.name == name
    assert scenario.origin == f"preset {name}"
    assert scenario.gpus
    assert scenario.hostname
    header = (PRESET_DIR / f"{name}.yaml").read_text(encoding="utf-8").split("\nname:")[0]
    assert header.startswith(f"# {name}:")
    # the header says which alerts it is designed to trigger (or that it triggers none)
    assert "Gpu" in header or "no alert" in header.lower() or "nothing" in header.lower()


def test_preset_shapes() -> None:
    assert len(load_scenario("training-node").gpus) == 8
    assert len(load_scenario("kubernetes-node").gpus) == 4
    assert 2 <= len(load_scenario("shared-workstation").gpus) <= 4
    k8s = load_scenario("kubernetes-node")
    assert {p.workload.labels["namespace"] for p in k8s.processes if p.workload} >= {
        "ml-training", "inference"}
    users = {p.user for p in load_scenario("shared-workstation").processes}
    assert len(users) >= 3


def test_slurm_node_has_job_allocations_without_processes() -> None:
    slurm = load_scenario("slurm-node")
    jobs = {(a.gpu, a.slurm_job, a.user, a.uid) for a in slurm.allocations}
    assert (7, "913520", "dave", 2004) in jobs
    busy_gpus = {p.gpu for p in slurm.processes}
    assert 7 not in busy_gpus  # given to a job that runs nothing on it
    assert {a.resource for a in slurm.allocations} == {"gres/gpu"}


def test_list_of_gpus_expands_to_one_rank_per_gpu() -> None:
    data = {"gpus": [{"model": "Tesla T4", "count": 3}],
            "processes": [{"gpu": [0, 2], "pid": 500, "user": "bob", "memory": "2GiB"}]}
    scenario = parse_scenario(data, "x.yaml")
    assert [g.index for g in scenario.gpus] == [0, 1, 2]
    assert [(p.gpu, p.pid) for p in scenario.processes] == [(0, 500), (2, 501)]


def test_values_parse_with_units() -> None:
    scenario = parse_scenario(_base(memory="1.5GiB", start="-3d", stop="2h", ramp="30s",
                                    leak_per_second="2MiB", type="compute+graphics",
                                    pod={"namespace": "ns", "pod": "p", "container": "c"}),
                              "x.yaml", "x")
    proc = scenario.processes[0]
    assert proc.memory_bytes == int(1.5 * (1 << 30))
    assert (proc.start, proc.stop, proc.ramp) == (-3 * 86400.0, 7200.0, 30.0)
    assert proc.leak_per_second == 2.0 * (1 << 20)
    assert proc.type is ProcessType.COMPUTE_GRAPHICS
    assert proc.workload is not None
    assert (proc.workload.kind, proc.workload.labels) == (
        "kubernetes", {"namespace": "ns", "pod": "p", "container": "c"})
    assert proc.uid >= 1000  # derived, not root
    root = parse_scenario(_base(user="root"), "x.yaml").processes[0]
    assert root.uid == 0
    assert parse_scenario(_base(memory=4096), "x.yaml").processes[0].memory_bytes == 4096
    assert parse_scenario(_base(memory="40GB"), "x.yaml").processes[0].memory_bytes == 40 * 10**9


BAD_INPUTS: list[tuple[str, dict[str, Any] | list[int], str]] = [
    ("unknown top key", {"gpus": [{"model": "Tesla T4"}], "gpuz": 1}, "gpuz: unknown key"),
    ("unknown gpu key", {"gpus": [{"model": "Tesla T4", "modle": 1}]}, "gpus[0].modle: unknown"),
    ("unknown process key", _base(memroy="1GiB"), "processes[0].memroy: unknown key"),
    ("unknown model", {"gpus": [{"model": "NVIDIA H1000"}]}, "gpus[0].model: unknown GPU model"),
    ("wrong type number", _base(utilization="high"), "processes[0].utilization: expected a number"),
    ("wrong type int", {"gpus": [{"model": "Tesla T4", "count": True}]}, "count: expected an int"),
    ("wrong type list", {"gpus": {"model": "Tesla T4"}}, "gpus: expected a list"),
    ("wrong type text", _base(user=5), "processes[0].user: expected a non-empty string"),
    ("negative size", _base(memory="-3GiB"), "processes[0].memory: must not be negative"),
    ("negative number", _base(memory=-5), "processes[0].memory: must not be negative"),
    ("negative leak", _base(leak_per_second=-1), "leak_per_second: must not be negative"),
    ("negative ramp", _base(ramp="-5s"), "processes[0].ramp: must not be negative"),
    ("bad size", _base(memory="lots"), "processes[0].memory: expected a size"),
    ("bad duration", {"gpus": [{"model": "Tesla T4", "lost_at": "soon"}]}, "lost_at: expected a"),
    ("ratio out of range", _base(utilization=1.5), "utilization: 1.5 is out of range"),
    ("missing gpu", _base(gpu=3), "processes[0].gpu: GPU 3 does not exist"),
    ("negative gpu", _base(gpu=-1), "processes[0].gpu: GPU -1 does not exist"),
    ("gpu not int", _base(gpu="zero"), "processes[0].gpu: expected a GPU index"),
    ("no gpus", {"gpus": []}, "gpus: needs at least one GPU"),
    ("gpus missing", {"processes": []}, "gpus: is required"),
    ("not a mapping", [1, 2], "top level: expected a mapping"),
    ("missing user", _base(user=None), "processes[0].user: is required"),
    ("bad process type", _base(type="cuda"), "processes[0].type: unknown type 'cuda'"),
    ("stop before start", _base(start=10, stop=5), "processes[0].stop: must be after start"),
    ("pod incomplete", _base(pod={"namespace": "x"}), "processes[0].pod.pod: is required"),
    ("pod unknown key", _base(pod={"namespace": "x", "pod": "p", "container": "c", "x": 1}),
     "processes[0].pod.x: unknown key"),
    ("too big", _base(memory="90GiB"), "processes[0].memory: 90.0 GiB do not fit GPU 0"),
    ("power above model", {"gpus": [{"model": "Tesla T4", "power_limit_watts": 300}]},
     "gpus[0].power_limit_watts: 300 is out of range"),
    ("ecc injection", {"gpus": [{"model": "Tesla T4", "ecc_uncorrected": [{"at": 5, "n": 1}]}]},
     "gpus[0].ecc_uncorrected[0].n: unknown key"),
    ("job allocation with a pod",
     {**_base(), "allocations": [{"gpu": 0, "slurm_job": "7", "user": "a", "pod": "p"}]},
     "allocations[0].pod: a Slurm job's allocation has no pod fields"),
    ("job allocation without user", {**_base(), "allocations": [{"gpu": 0, "slurm_job": "7"}]},
     "allocations[0].user: is required"),
    ("pod allocation with a user", {**_base(), "allocations": [
        {"gpu": 0, "namespace": "n", "pod": "p", "container": "c", "user": "a"}]},
     "allocations[0].user: only a Slurm job's allocation"),
]


@pytest.mark.parametrize(("label", "data", "expected"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_one_clear_line(label: str, data: Any, expected: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data, "lab.yaml")
    message = str(caught.value)
    assert message.startswith("lab.yaml: "), label
    assert expected in message
    assert "\n" not in message


def test_processes_that_do_not_fit_together_are_rejected() -> None:
    data = {"gpus": [{"model": "Tesla T4"}],
            "processes": [{"gpu": 0, "user": "a", "memory": "8GiB"},
                          {"gpu": 0, "user": "b", "memory": "8GiB", "start": 60}]}
    with pytest.raises(ScenarioError, match=r"processes on GPU 0 need 16\.\d GiB at t=60 s"):
        parse_scenario(data, "t4.yaml")
    data["processes"][0]["stop"] = 30  # type: ignore[index]
    assert len(parse_scenario(data, "t4.yaml").processes) == 2  # one after the other: fine


def test_duplicate_pid_and_two_leaks_are_rejected() -> None:
    dup = {"gpus": [{"model": "Tesla T4"}],
           "processes": [{"gpu": 0, "user": "a", "pid": 7, "memory": "1GiB"},
                         {"gpu": 0, "user": "b", "pid": 7, "memory": "1GiB"}]}
    with pytest.raises(ScenarioError, match="pid 7 appears twice on GPU 0"):
        parse_scenario(dup, "d.yaml")
    leaks = {"gpus": [{"model": "Tesla T4"}],
             "processes": [{"gpu": 0, "user": u, "memory": "1GiB", "leak_per_second": "1MiB"}
                           for u in ("a", "b")]}
    with pytest.raises(ScenarioError, match="more than one leaking process"):
        parse_scenario(leaks, "l.yaml")


def test_load_file_by_path(tmp_path: Path) -> None:
    path = tmp_path / "my-lab.yaml"
    path.write_text("gpus:\n  - model: Tesla T4\nprocesses:\n  - {gpu: 0, user: zoe}\n",
                    encoding="utf-8")
    scenario = load_scenario(str(path))
    assert scenario.name == "my-lab"
    assert scenario.origin == str(path)
    assert scenario.processes[0].user == "zoe"


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    bad_yaml = tmp_path / "broken.yaml"
    bad_yaml.write_text("gpus:\n  - model: [\n", encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"broken\.yaml: line \d+: invalid YAML"):
        load_scenario(str(bad_yaml))
    bad_field = tmp_path / "field.yaml"
    bad_field.write_text("gpus:\n  - model: Tesla T4\n    lost_at: soon\n", encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"field\.yaml: gpus\[0\]\.lost_at"):
        load_scenario(str(bad_field))
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ScenarioError, match=r"binary\.yaml: cannot read"):
        load_scenario(str(binary))
    empty = tmp_path / "empty.yaml"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(ScenarioError, match="expected a mapping, got nothing"):
        load_scenario(str(empty))


def test_unknown_name_lists_presets() -> None:
    with pytest.raises(ScenarioError) as caught:
        load_scenario("no-such-preset")
    assert "no-such-preset: no such scenario" in str(caught.value)
    assert "memory-leak" in str(caught.value)


def test_synthetic_fleet() -> None:
    fleet = sc.synthetic_fleet(gpus=8, processes_per_gpu=32)
    assert len(fleet.gpus) == 8
    assert len(fleet.processes) == 256
    for gpu in fleet.gpus:
        on_gpu = [p for p in fleet.processes if p.gpu == gpu.index]
        assert len(on_gpu) == 32
        assert sum(p.memory_bytes for p in on_gpu) < 0.8 * gpu.model.memory_bytes
        assert sum(p.utilization for p in on_gpu) <= 1.6
    assert len({(p.gpu, p.pid) for p in fleet.processes}) == 256
    assert sc.synthetic_fleet(2, 3, seed=1) == sc.synthetic_fleet(2, 3, seed=1)
    assert sc.synthetic_fleet(2, 3, seed=1) != sc.synthetic_fleet(2, 3, seed=2)
    assert load_scenario("synthetic:2x5") == sc.synthetic_fleet(2, 5)
    with pytest.raises(ScenarioError, match=r"gpus must be 1\.\.64"):
        sc.synthetic_fleet(gpus=0)
    with pytest.raises(ScenarioError, match="unknown GPU model"):
        sc.synthetic_fleet(model="NVIDIA H1000")
