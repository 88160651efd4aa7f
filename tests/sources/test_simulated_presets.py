"""The bundled presets behave as their header comments say, over simulated time."""

from __future__ import annotations

import itertools

import pytest

from exporter.snapshot import gpu_activity
from exporter.sources.simulated.scenario import list_presets, load_scenario
from tests.sources.test_simulated import (
    ALL,
    T0,
    active_reasons,
    make_source,
    memory_ratio,
    play,
    process_of,
)


def test_memory_leak_passes_90_percent_then_ooms_and_restarts() -> None:
    ratios, pids, exit_t = [], [], None
    for t, snap in play("memory-leak", until=420, step=5):
        gpu0 = snap.gpus[0]
        ratios.append(memory_ratio(gpu0))
        pids.append(tuple(p.pid for p in gpu0.processes))
        assert memory_ratio(gpu0) <= 1.0
        assert gpu0.value("gpu_memory_free_bytes") is not None
        assert 0.5 < memory_ratio(snap.gpus[1]) < 0.6  # the other GPU is unaffected
        if exit_t is None and not gpu0.processes:
            exit_t = t
    assert ratios[0] < 0.9 < max(ratios)
    assert next(i for i, r in enumerate(ratios) if r > 0.9) * 5 <= 60  # within the first minute
    assert exit_t is not None
    peak = ratios.index(max(ratios))
    assert all(b > a for a, b in itertools.pairwise(ratios[:peak + 1]))
    assert max(ratios) > 0.98  # it really ran out
    life = exit_t + 736  # started 736 s before the exporter
    assert 600 <= life <= 1200  # reaches the total within 10-20 minutes
    assert pids[0] == (7720,)
    assert pids[-1] == (7821,)


def test_overheating_climbs_past_80_then_90_and_throttles() -> None:
    seen: dict[str, float] = {}
    for t, snap in play("overheating", until=300, step=2):
        hot = snap.gpus[2]
        temp = hot.value("gpu_temperature_celsius")
        assert temp is not None
        for mark in (80, 90):
            if temp > mark:
                seen.setdefault(f">{mark}", t)
        if "sw_thermal_slowdown" in active_reasons(hot):
            seen.setdefault("sw", t)
            assert hot.value("gpu_sm_clock_hertz") is not None
            assert temp >= 88
        if "hw_thermal_slowdown" in active_reasons(hot):
            seen.setdefault("hw", t)
        for other in (snap.gpus[0], snap.gpus[1], snap.gpus[3]):
            assert other.value("gpu_temperature_celsius") is not None
            assert other.value("gpu_temperature_celsius") < 75
            assert not active_reasons(other) & {"sw_thermal_slowdown", "hw_thermal_slowdown"}
    assert seen[">80"] < seen[">90"] <= 120
    assert seen[">80"] <= seen["sw"] <= seen["hw"]
    cool, _ = make_source("overheating")
    normal = cool.collect(ALL).gpus[0]
    assert normal.value("gpu_sm_clock_hertz") is not None
    last_hot = snap.gpus[2]
    assert last_hot.value("gpu_sm_clock_hertz") is not None
    assert last_hot.value("gpu_sm_clock_hertz") < normal.value("gpu_sm_clock_hertz")


def test_calm_stays_under_every_threshold_for_an_hour() -> None:
    energies = []
    for _, snap in play("calm", until=3600, step=30):
        assert not snap.errors
        for gpu in snap.gpus:
            assert gpu.up
            assert memory_ratio(gpu) < 0.7
            assert gpu.value("gpu_temperature_celsius") is not None
            assert gpu.value("gpu_temperature_celsius") < 70
            assert gpu.value("gpu_utilization_ratio") is not None
            assert gpu.value("gpu_utilization_ratio") >= 0.4
            assert gpu.value("gpu_power_usage_watts") is not None
            assert gpu.value("gpu_power_limit_watts") is not None
            assert gpu.value("gpu_power_usage_watts") / gpu.value("gpu_power_limit_watts") >= 0.4
            assert active_reasons(gpu) == set()
            assert gpu.labelled("gpu_ecc_errors_total") is not None
            assert gpu.labelled("gpu_ecc_errors_total")["uncorrected"] == 0
            assert gpu.processes
            for proc in gpu.processes:
                assert proc.sm_utilization_ratio is not None
                assert proc.sm_utilization_ratio > 0.3
        energies.append([g.value("gpu_energy_consumed_joules_total") or 0.0 for g in snap.gpus])
    for earlier, later in itertools.pairwise(energies):
        assert all(b > a > 0 for a, b in zip(earlier, later, strict=True))


def test_forgotten_process_is_idle_with_an_old_start_time() -> None:
    source, clock = make_source("shared-workstation")
    for t in (0, 600, 3600):
        clock.now = T0 + t
        gpu2 = source.collect(ALL).gpus[2]
        alice = process_of(gpu2, "alice")
        assert alice.owner is not None
        assert alice.owner.start_time_seconds <= T0 - 2 * 86400
        assert alice.sm_utilization_ratio == 0.0
        assert alice.used_memory_bytes is not None
        assert alice.used_memory_bytes > 30 * 2**30
        assert gpu2.value("gpu_utilization_ratio") == 0.0
        assert "gpu_idle" in active_reasons(gpu2)
        assert gpu2.value("gpu_sm_clock_hertz") is not None
        assert gpu2.value("gpu_sm_clock_hertz") < 500e6


@pytest.mark.parametrize(("preset", "gpu", "user"),
                         [("input-starved", 0, "dave"), ("shared-workstation", 1, "erin")])
def test_starved_gpu_holds_memory_with_low_activity_and_power(preset: str, gpu: int,
                                                              user: str) -> None:
    """Low activity: SM activity where the GPU has GPM (input-starved's H100), utilisation
    where it has not (shared-workstation's RTX 4090)."""
    utils = []
    for _, snap in play(preset, until=900, step=15):
        reading = snap.gpus[gpu]
        assert reading.value("gpu_power_usage_watts") is not None
        assert reading.value("gpu_power_limit_watts") is not None
        assert reading.value("gpu_power_usage_watts") / reading.value("gpu_power_limit_watts") < 0.4
        assert memory_ratio(reading) > 0.5
        assert process_of(reading, user).used_memory_bytes
        activity = gpu_activity(reading)
        assert activity is not None
        utils.append(activity)
    assert 0.05 <= sum(utils) / len(utils) < 0.4
    assert len(set(utils)) > 5  # it fluctuates


def test_training_node_is_busy_hot_ish_and_healthy() -> None:
    for _, snap in play("training-node", until=600, step=60):
        assert len(snap.gpus) == 8
        for gpu in snap.gpus:
            assert 0.7 <= memory_ratio(gpu) <= 0.85
            assert gpu.value("gpu_temperature_celsius") is not None
            assert 65 <= gpu.value("gpu_temperature_celsius") < 80
            assert gpu.value("gpu_utilization_ratio") is not None
            assert gpu.value("gpu_utilization_ratio") > 0.8
            assert len(gpu.processes) == 1
            assert gpu.processes[0].pid == 61000 + gpu.identity.index
            assert active_reasons(gpu) == set()


def test_kubernetes_processes_carry_pods() -> None:
    source, clock = make_source("kubernetes-node")
    first = source.collect(ALL)
    clock.now += 60
    later = source.collect(ALL)
    pods = {p.pid: p.workload for g in first.gpus for p in g.processes}
    namespaces = {pod.labels["namespace"] for pod in pods.values() if pod}
    assert namespaces >= {"ml-training", "inference", "research"}
    assert pods[9921] is None  # the host process
    assert pods[3312] is not None
    assert (pods[3312].kind, pods[3312].labels["container"]) == ("kubernetes", "trainer")
    assert pods[3312].ids["pod_uid"]
    assert len(pods[3312].ids["container_id"]) == 64
    assert pods == {p.pid: p.workload for g in later.gpus for p in g.processes}  # stable
    # the notebook's user holds memory and runs nothing anywhere (a per-user idle holder)
    notebook = [p for g in later.gpus for p in g.processes if p.owner and p.owner.user == "1000"]
    assert [p.pid for p in notebook] == [5821]
    assert notebook[0].sm_utilization_ratio == 0.0


def test_one_lost_gpu_does_not_hide_the_others_and_ecc_is_injected() -> None:
    source, clock = make_source("gpu-failure")
    before = source.collect(ALL)
    assert all(g.up for g in before.gpus)
    assert not before.errors
    assert before.gpus[1].labelled("gpu_ecc_errors_total") is not None
    assert before.gpus[1].labelled("gpu_ecc_errors_total")["uncorrected"] == 0
    clock.now = T0 + 3600
    after = source.collect(ALL)
    lost = after.gpus[3]
    assert (lost.up, lost.error, lost.processes) == (False, "GPU is lost", ())
    assert lost.value("gpu_memory_used_bytes") is None
    assert lost.value("gpu_temperature_celsius") is None
    assert lost.identity == before.gpus[3].identity
    assert after.errors == {"gpu_lost": 1}
    for gpu in after.gpus[:3]:
        assert gpu.up
        assert gpu.value("gpu_memory_used_bytes")
        assert gpu.processes
    ecc = after.gpus[1].labelled("gpu_ecc_errors_total")
    assert ecc is not None
    assert ecc["uncorrected"] == 2
    assert ecc["corrected"] == 30
    ecc_name = "gpu_ecc_errors_total"
    assert after.gpus[0].labelled(ecc_name) == before.gpus[0].labelled(ecc_name)


def test_power_cap_holds_power_at_the_lowered_limit() -> None:
    source, _ = make_source("shared-workstation")
    capped, free = source.collect(ALL).gpus[:2]
    assert capped.value("gpu_power_limit_watts") == 300.0
    assert free.value("gpu_power_limit_watts") == 450.0
    assert "sw_power_cap" in active_reasons(capped)
    assert "sw_power_cap" not in active_reasons(free)
    assert capped.value("gpu_power_usage_watts") is not None
    assert 0.95 * 300 <= capped.value("gpu_power_usage_watts") <= 300
    assert capped.value("gpu_sm_clock_hertz") is not None
    assert free.value("gpu_sm_clock_hertz") is not None
    assert capped.value("gpu_sm_clock_hertz") < free.value("gpu_sm_clock_hertz")


@pytest.mark.parametrize("name", list_presets())
def test_invariants_hold_in_every_preset(name: str) -> None:
    scenario = load_scenario(name)
    for _, snap in play(name, until=1800, step=37):
        for gpu in snap.gpus:
            if not gpu.up:
                continue
            spec = scenario.gpus[gpu.identity.index]
            used, free = gpu.value("gpu_memory_used_bytes"), gpu.value("gpu_memory_free_bytes")
            assert used is not None
            assert free is not None
            reserved = gpu.value("gpu_memory_reserved_bytes") or 0
            assert used + free + reserved == gpu.identity.memory_total_bytes
            assert sum(p.used_memory_bytes or 0 for p in gpu.processes) < used
            if gpu.value("gpu_mig_enabled") == 1.0:  # NVML has no utilisation under MIG
                assert gpu.value("gpu_utilization_ratio") is None
                assert all(p.sm_utilization_ratio is None for p in gpu.processes)
            else:
                assert gpu.value("gpu_utilization_ratio") is not None
                assert 0.0 <= gpu.value("gpu_utilization_ratio") <= 1.0
            assert gpu.value("gpu_power_usage_watts") is not None
            assert gpu.value("gpu_power_limit_watts") is not None
            watts = gpu.value("gpu_power_usage_watts")
            assert spec.model.idle_watts * 0.9 <= watts <= gpu.value("gpu_power_limit_watts")
            assert gpu.value("gpu_temperature_celsius") is not None
            celsius = gpu.value("gpu_temperature_celsius")
            assert spec.idle_celsius - 2 <= celsius <= spec.full_load_celsius + 2
            assert (gpu.value("gpu_performance_state") == 8) == (not gpu.processes)
            utilization = gpu.value("gpu_utilization_ratio")
            if utilization is not None:
                assert ("gpu_idle" in active_reasons(gpu)) == (utilization < 0.02)
            for proc in gpu.processes:
                assert proc.owner is not None
                assert proc.owner.start_time_seconds <= snap.taken_at


def test_input_starved_tells_apart_what_utilisation_cannot() -> None:
    """GPM's SM activity separates the starved job (GPU 0) and the hung spinning one (GPU 2)
    from the busy one (GPU 1), though utilisation calls all three busy; the FP32 job leaves
    its tensor cores unused; training runs on them."""
    for _, snap in play("input-starved", until=900, step=60):
        starved, busy, hung = snap.gpus
        for reading in (starved, busy, hung):
            assert (reading.value("gpu_utilization_ratio") or 0) > 0.5
        assert 0.05 <= (starved.value("gpu_sm_active_ratio") or 0) < 0.2
        assert (busy.value("gpu_sm_active_ratio") or 0) > 0.8
        assert (hung.value("gpu_sm_active_ratio") or 1) < 0.01
        assert busy.value("gpu_tensor_active_ratio") == 0.0
        assert (busy.labelled("gpu_pipe_active_ratio") or {}).get("fp32", 0) > 0.5
    for _, snap in play("training-node", until=120, step=60):
        for reading in snap.gpus:
            assert (reading.value("gpu_tensor_active_ratio") or 0) > 0.7
            assert (reading.labelled("gpu_tensor_pipe_active_ratio") or {}).get("hmma", 0) > 0.7


def test_gpus_without_gpm_report_why_and_no_activity() -> None:
    """Ampere and older have no GPM: the status says so and no activity series exist."""
    for _, snap in play("slurm-node", until=60, step=60):
        for reading in snap.gpus:
            assert reading.labelled("gpu_exporter_gpm_status") == {"not_supported": 1.0}
            assert reading.value("gpu_sm_active_ratio") is None


def test_mig_instances_report_their_own_activity() -> None:
    """Under MIG the GPU-wide figures are absent and each GPU instance has its own."""
    for _, snap in play("mig-node", until=60, step=60):
        mig_gpu = snap.gpus[0]
        assert mig_gpu.value("gpu_sm_active_ratio") is None
        assert mig_gpu.labelled("gpu_exporter_gpm_status") == {"ok": 1.0}
        assert mig_gpu.mig
        by_instance = {d.gpu_instance: d.activity.get("gpu_sm_active_ratio")
                       for d in mig_gpu.mig}
        assert set(by_instance) == {2, 7, 8, 9}
        assert (by_instance[2] or 0) > 0.5
        assert by_instance[9] == 0.0  # the empty instance
