"""The simulated source: determinism, the presets' behaviour over simulated time, options
(its speed is bench/bench_scrape.py's figure)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from exporter.catalogue.metrics import SWITCHABLE_GROUPS, Group, default_groups
from exporter.catalogue.metrics.process import LAST_ACTIVE
from exporter.snapshot import GpuProcess, GpuReading, Snapshot
from exporter.sources.base import Source
from exporter.sources.simulated.scenario import (
    Scenario,
    load_scenario,
    parse_scenario,
    synthetic_fleet,
)
from exporter.sources.simulated.source import LOADED_AFTER, SimulatedSource
from tests.scheduler_fakes import FakeClock

T0 = 1_750_000_000.0  # wall-clock origin of the fake clock
ALL = frozenset(SWITCHABLE_GROUPS)


def make_source(name: str | Scenario, seed: int = 0, speed: float = 1.0) -> tuple[SimulatedSource,
                                                                             FakeClock]:
    clock = FakeClock(T0)
    scenario = load_scenario(name) if isinstance(name, str) else name
    source = SimulatedSource(scenario, seed=seed, clock=clock, speed=speed)
    source.start()
    return source, clock


def play(name: str, until: float, step: float,
          groups: frozenset[Group] = ALL) -> Iterator[tuple[float, Snapshot]]:
    """Snapshots every ``step`` simulated seconds from 0 to ``until`` (speed 1)."""
    source, clock = make_source(name)
    t = 0.0
    while t <= until:
        clock.now = T0 + t
        yield t, source.collect(groups)
        t += step


def memory_ratio(gpu: GpuReading) -> float:
    assert gpu.value("gpu_memory_used_bytes") is not None
    return gpu.value("gpu_memory_used_bytes") / gpu.identity.memory_total_bytes


def active_reasons(gpu: GpuReading) -> set[str]:
    assert gpu.labelled("gpu_throttle_reason_active") is not None
    return {reason for reason, on in gpu.labelled("gpu_throttle_reason_active").items() if on}


def process_of(gpu: GpuReading, user: str) -> GpuProcess:
    return next(p for p in gpu.processes if p.owner is not None and p.owner.user == user)


def test_implements_the_source_protocol() -> None:
    source, _ = make_source("calm")
    as_source: Source = source
    assert as_source.name == "simulated"
    snap = source.collect(default_groups())
    assert (snap.source, snap.hostname, snap.source_up) == ("simulated", "calm-node-01", True)
    assert snap.taken_at == T0
    assert 0 < snap.duration_seconds < 10  # measured (its speed: bench/bench_scrape.py)
    assert snap.driver_version
    assert snap.cuda_driver_version
    source.close()
    source.close()  # idempotent
    named = SimulatedSource(load_scenario("calm"), clock=FakeClock(T0), hostname="box")
    assert named.collect(default_groups()).hostname == "box"


def test_same_inputs_give_equal_snapshots_and_seed_changes_noise() -> None:
    readings = [T0 + t for t in (0, 0.5, 7, 61, 300, 299, 3600)]
    runs = []
    for seed in (3, 3, 4):
        source, clock = make_source("shared-workstation", seed=seed)
        snaps = []
        for now in readings:
            clock.now = now
            snaps.append(source.collect(ALL))
        runs.append(snaps)
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    utils = [[g.value("gpu_utilization_ratio") for s in run for g in s.gpus] for run in runs]
    assert utils[0] != utils[2]  # different noise
    uuids = [{g.identity.uuid for g in run[0].gpus} for run in runs]
    assert uuids[0] == uuids[1]
    assert uuids[0].isdisjoint(uuids[2])
    assert all(u.startswith("GPU-") and len(u) == 40 for u in uuids[0])


def test_results_do_not_depend_on_how_often_collect_runs() -> None:
    often, clock_a = make_source("memory-leak")
    rarely, clock_b = make_source("memory-leak")
    for t in range(0, 901, 3):
        clock_a.now = T0 + t
        last = often.collect(ALL)
    clock_b.now = T0 + 900
    assert rarely.collect(ALL) == last


def test_speed_factor_compresses_simulated_time() -> None:
    slow, slow_clock = make_source("memory-leak", speed=1.0)
    fast, fast_clock = make_source("memory-leak", speed=10.0)
    slow_clock.now, fast_clock.now = T0 + 120, T0 + 12
    a, b = slow.collect(ALL), fast.collect(ALL)
    strip = [dataclasses.replace(g, processes=()) for g in a.gpus]
    assert strip == [dataclasses.replace(g, processes=()) for g in b.gpus]
    assert [p.used_memory_bytes for g in a.gpus for p in g.processes] == \
        [p.used_memory_bytes for g in b.gpus for p in g.processes]
    # start times map onto the compressed wall timeline: start + t0 / speed
    started = {s: g.processes[0].owner.start_time_seconds  # type: ignore[union-attr]
               for s, g in (("slow", a.gpus[0]), ("fast", b.gpus[0]))}
    assert started["slow"] == pytest.approx(T0 - 736)
    assert started["fast"] == pytest.approx(T0 - 73.6)
    with pytest.raises(ValueError, match="speed must be a positive number"):
        SimulatedSource(load_scenario("calm"), speed=0)


def test_groups_turn_reads_off() -> None:
    source, _ = make_source("shared-workstation")
    default = source.collect(default_groups())
    gpu = default.gpus[0]
    assert gpu.value("gpu_energy_consumed_joules_total") is None
    assert gpu.labelled("gpu_pcie_throughput_bytes_per_second") is None
    assert gpu.value("gpu_fan_speed_ratio") is not None
    assert gpu.labelled("gpu_ecc_errors_total") is None
    every = source.collect(ALL).gpus[0]
    assert every.value("gpu_energy_consumed_joules_total")
    assert every.labelled("gpu_pcie_throughput_bytes_per_second") is not None
    off = source.collect(frozenset())
    for reading in off.gpus:
        assert reading.values == {}
        assert reading.processes == ()
    no_putil = source.collect(default_groups() - {Group.PROCESS_UTILIZATION})
    assert all(p.sm_utilization_ratio is None for g in no_putil.gpus for p in g.processes)
    assert all(p.used_memory_bytes for g in no_putil.gpus for p in g.processes)


def test_energy_integrates_power() -> None:
    source, clock = make_source("training-node")
    first = source.collect(ALL).gpus[0]
    clock.now += 600
    second = source.collect(ALL).gpus[0]
    assert first.value("gpu_energy_consumed_joules_total") is not None
    assert second.value("gpu_energy_consumed_joules_total") is not None
    energy = "gpu_energy_consumed_joules_total"
    mean_watts = (second.value(energy) - first.value(energy)) / 600
    assert second.value("gpu_power_usage_watts") is not None
    assert mean_watts == pytest.approx(second.value("gpu_power_usage_watts"), rel=0.1)


def test_time_going_backwards_is_harmless() -> None:
    source, clock = make_source("memory-leak")
    clock.now = T0 + 500
    later = source.collect(ALL)
    clock.now = T0 + 100
    earlier = source.collect(ALL)
    fresh, fresh_clock = make_source("memory-leak")
    fresh_clock.now = T0 + 100
    assert earlier == fresh.collect(ALL)
    clock.now = T0 + 500
    assert source.collect(ALL) == later


def test_restart_cycles_and_processes_exit_at_stop() -> None:
    data = {"gpus": [{"model": "Tesla T4"}],
            "processes": [{"gpu": 0, "pid": 100, "user": "u", "start": 10, "stop": 20,
                           "restart_after": 5, "memory": "1GiB", "utilization": 0.5}]}
    source, clock = make_source(parse_scenario(data, "r.yaml"))
    seen = {}
    for t in (0, 12, 22, 26, 36, 41):
        clock.now = T0 + t
        seen[t] = [p.pid for p in source.collect(ALL).gpus[0].processes]
    assert seen == {0: [], 12: [100], 22: [], 26: [201], 36: [], 41: [302]}


def test_synthetic_fleet_collects_every_process_with_its_owner() -> None:
    """(Its speed is a benchmark's figure, bench/bench_scrape.py, never a timed assertion.)"""
    source, clock = make_source(synthetic_fleet(gpus=8, processes_per_gpu=32))
    options = default_groups()
    for i in range(3):
        clock.now = T0 + i
        snap = source.collect(options)
    assert sum(len(g.processes) for g in snap.gpus) >= 200
    assert all(p.owner is not None for g in snap.gpus for p in g.processes)


def test_last_active_now_when_computing_and_after_loading_when_idle() -> None:
    source, clock = make_source("shared-workstation")
    clock.now += 600.0
    snap = source.collect(default_groups())
    now = clock.now
    procs = [p for gpu in snap.gpus for p in gpu.processes]
    for proc in procs:
        last = proc.values[LAST_ACTIVE]
        assert proc.owner is not None
        if (proc.sm_utilization_ratio or 0.0) > 0.0:
            assert last == pytest.approx(now)
        else:  # configured idle: ran its last kernel LOADED_AFTER s after it started
            assert last <= proc.owner.start_time_seconds + LOADED_AFTER + 1e-6
    assert any(now - p.values[LAST_ACTIVE] > 3600 for p in procs)  # the forgotten notebook
    off = source.collect(default_groups() - {Group.PROCESS_UTILIZATION})
    assert all(p.values == {} for gpu in off.gpus for p in gpu.processes)
