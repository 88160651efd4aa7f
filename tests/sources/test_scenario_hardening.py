"""Extreme scenario files: each is refused with one line (fast, bounded memory) or works, and
a scenario that loads collects without errors; no value may pass validation and then fail
every collection."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.catalogue.metrics import default_groups
from exporter.sources.simulated.scenario import ScenarioError, load_scenario, parse_scenario
from exporter.sources.simulated.source import SimulatedSource

H100 = "NVIDIA H100 80GB HBM3"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(9)
) + "gpus: [{model: Tesla T4}]\n"


def _gpu_file(**fields: str) -> str:
    extra = "".join(f"    {k}: {v}\n" for k, v in fields.items())
    return f"gpus:\n  - model: {H100}\n{extra}"


def _proc_file(**fields: str) -> str:
    extra = "".join(f"    {k}: {v}\n" for k, v in fields.items())
    return _gpu_file() + f"processes:\n  - gpu: 0\n    user: alice\n{extra}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_gpu_file(idle_celsius=".nan"), "finite"),
        (_gpu_file(full_load_celsius=".inf"), "finite"),
        (_gpu_file(ecc_corrected_per_hour="1.0e+300"), "finite"),
        (_gpu_file(thermal_time_constant=".inf"), "100 years"),
        (_gpu_file(lost_at="1.0e+300"), "100 years"),
        (_gpu_file(count="100000000000000000000000"), "count"),
        (_proc_file(memory=".inf"), "1 PiB"),
        (_proc_file(memory=".nan"), "1 PiB"),
        (_proc_file(memory="99999999999TiB"), "1 PiB"),
        (_proc_file(leak_per_second="1.0e+30"), "1 PiB"),
        (_proc_file(pid="1000000000000000000000"), "pid"),
        (_proc_file(uid="-1"), "uid"),
        (_proc_file(uid="99999999999"), "uid"),
        (_proc_file(start="-.inf"), "100 years"),
        (_proc_file(utilization=".nan"), "finite"),
        (_proc_file(name='"a\\0b"'), "unprintable"),
        (_proc_file(name='"\\uD800"'), "invalid"),  # libyaml refuses lone surrogates
        (_proc_file(name='"' + "x" * 1000 + '"'), "longer than"),
        (BOMB, "aliases"),
        ("gpus: " + "[" * 100_000 + "]" * 100_000 + "\n", "nest"),
        ("gpus:\n" + "  - {model: Tesla T4}\n" * 300_000, "larger than"),
    ],
)
def test_extreme_files_are_refused_with_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "extreme.yaml"
    path.write_text(text, encoding="utf-8")
    started = time.monotonic()
    with pytest.raises(ScenarioError) as info:
        load_scenario(str(path))
    assert time.monotonic() - started < 5
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert "extreme.yaml" in str(info.value)


def test_twenty_thousand_processes_load_in_linear_time(tmp_path: Path) -> None:
    # The quadratic fit check took 13 s for 10,000; a pass per process would take ~50 s here.
    lines = [f"gpus:\n  - model: {H100}\nprocesses:"]
    lines += [f"  - {{gpu: 0, pid: {10000 + i}, user: u{i % 50}, memory: 2MiB}}"
              for i in range(20_000)]
    path = tmp_path / "many.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    started = time.monotonic()
    source = SimulatedSource(load_scenario(str(path)))
    snapshot = source.collect(default_groups())
    assert time.monotonic() - started < 20
    assert len(snapshot.gpus[0].processes) == 20_000


def test_fit_check_still_refuses_overcommit() -> None:
    procs = [{"gpu": 0, "user": "a", "memory": "30GiB", "start": 0},
             {"gpu": 0, "user": "b", "memory": "30GiB", "start": 10},
             {"gpu": 0, "user": "c", "memory": "30GiB", "start": 10, "stop": 20}]
    with pytest.raises(ScenarioError, match=r"need .* GiB at t=10 s"):
        parse_scenario({"gpus": [{"model": H100}], "processes": procs}, "test")
    procs[0]["stop"] = 5  # a leaves before b and c arrive: fits
    parse_scenario({"gpus": [{"model": H100}], "processes": procs}, "test")


KEYS = ["gpus", "processes", "model", "count", "gpu", "user", "memory", "pid", "uid", "start",
        "stop", "ramp", "leak_per_second", "utilization", "lost_at", "idle_celsius",
        "full_load_celsius", "thermal_time_constant", "power_limit_watts", "restart_after",
        "ecc_uncorrected", "at", "pod", "namespace", "container", "type", "name", "hostname"]
SCALARS = (st.none() | st.booleans() | st.integers(min_value=-10**30, max_value=10**30)
           | st.floats() | st.text(max_size=12)
           | st.sampled_from([H100, "Tesla T4", "1GiB", "30s", "-1h", "compute", "0", "1e400"]))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner,
                                                                max_size=5),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpus=st.lists(st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=4).map(
           lambda d: {"model": H100, **d}), min_size=1, max_size=2),
       procs=st.lists(st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=6).map(
           lambda d: {"gpu": 0, "user": "alice", **d}), max_size=3))
def test_fuzzed_scenarios_refuse_cleanly_or_collect(gpus: list[dict[str, Any]],
                                                    procs: list[dict[str, Any]]) -> None:
    message, scenario = "", None
    try:
        scenario = parse_scenario({"gpus": gpus, "processes": procs}, "fuzz")
    except ScenarioError as exc:
        message = str(exc)
    if scenario is None:
        assert "\n" not in message
        return
    now = [1_000_000.0]
    source = SimulatedSource(scenario, clock=lambda: now[0], speed=1000.0)
    for step in (0.0, 3600.0, 86400.0 * 30):
        now[0] = 1_000_000.0 + step
        snapshot = source.collect(default_groups())
        assert snapshot.source_up
        assert not any(snapshot.errors.values()), snapshot.errors
