"""The simulator's DRA claims, NVLink links and throttle time: the scenario keys, and counters
that are a function of simulated time alone (whatever the collection interval)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from exporter.catalogue import metrics
from exporter.catalogue.metrics import Group, default_groups
from exporter.snapshot import DraClaim
from exporter.sources.simulated.scenario import ScenarioError, load_scenario, parse_scenario
from exporter.sources.simulated.source import SimulatedSource
from exporter.sources.simulated.throttle import time_above

GROUPS = default_groups() | {Group.THROTTLE_TIME, Group.NVLINK}
TIME = metrics.THROTTLE_TIME.name


def _scenario(gpu: dict[str, Any], allocation: dict[str, Any] | None = None) -> Any:
    data: dict[str, Any] = {"hostname": "node-9", "gpus": [{"model": "NVIDIA H100 80GB HBM3",
                                                           **gpu}]}
    if allocation is not None:
        data["allocations"] = [{"gpu": 0, "namespace": "ml", "pod": "p", "container": "c",
                                **allocation}]
    return parse_scenario(data, "test")


def test_a_claim_defaults_to_nvidias_driver_the_host_pool_and_the_gpus_name() -> None:
    scenario = _scenario({}, {"claim": {"name": "gpus"}})
    assert scenario.allocations[0].claim == DraClaim("ml", "gpus", "gpu.nvidia.com", "node-9",
                                                     "gpu-0")
    rows = SimulatedSource(scenario, clock=lambda: 1000.0).collect(GROUPS).allocations
    assert (rows[0].gpu, rows[0].resource, rows[0].device_id) == ("0", "gpu.nvidia.com",
                                                                 "gpu-0")


@pytest.mark.parametrize(("gpu", "allocation", "message"), [
    ({}, {"claim": {"namespace": "x"}}, r"allocations\[0\]\.claim.*name"),
    ({}, {"claim": {"name": "a", "class": "b"}}, "class"),
    ({"model": "NVIDIA L40S", "nvlink": {}}, None, "no NVLink"),
    ({"nvlink": {"down": [18]}}, None, "0 to 17"),
    ({"nvlink": {"links": 40}}, None, "at most 36"),
    ({"nvlink": {"crc_per_hour": -1}}, None, "per hour"),
])
def test_bad_claims_and_links_are_one_clear_error(gpu: dict[str, Any],
                                                   allocation: dict[str, Any] | None,
                                                   message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        _scenario(gpu, allocation)


def test_links_only_where_the_scenario_describes_them() -> None:
    plain = SimulatedSource(_scenario({}), clock=lambda: 1000.0).collect(GROUPS).gpus[0]
    link_rows = {row.name for row in (metrics.NVLINK_CRC_FLIT_ERRORS, metrics.NVLINK_STATE,
                                      metrics.NVLINK_REPLAY_ERRORS)}
    assert not link_rows & set(plain.values)  # GPM's NVLink traffic is there, not these
    clock = [1000.0]
    source = SimulatedSource(_scenario({"nvlink": {"faulty": [2], "down": [5],
                                                   "crc_per_hour": 3600}}),
                             clock=lambda: clock[0])
    source.collect(GROUPS)
    clock[0] += 100.0
    reading = source.collect(GROUPS).gpus[0]
    crc = reading.labelled(metrics.NVLINK_CRC_FLIT_ERRORS.name)
    assert crc is not None
    assert len(crc) == 18
    assert crc["2"] == 100.0
    assert reading.labelled(metrics.NVLINK_STATE.name)["5"] == 0.0  # type: ignore[index]
    assert "12" not in reading.labelled(metrics.NVLINK_CRC_DATA_ERRORS.name)  # type: ignore[operator]


def test_throttle_time_does_not_depend_on_how_often_it_is_read() -> None:
    scenario = load_scenario("dra-node")
    every_second = SimulatedSource(scenario, clock=lambda: now[0])
    once = SimulatedSource(scenario, clock=lambda: now[0])
    now = [1000.0]
    every_second.collect(GROUPS)
    once.collect(GROUPS)
    previous: dict[str, float] | None = None
    for _ in range(120):
        now[0] += 1.0
        found = every_second.collect(GROUPS).gpus[0].labelled(TIME)
        assert found is not None
        if previous is not None:  # a counter: never down
            assert all(found[reason] >= previous[reason] for reason in found)
        previous = dict(found)
    assert once.collect(GROUPS).gpus[0].labelled(TIME) == previous
    assert previous is not None
    assert previous["sw_power_cap"] == pytest.approx(600.0 + 120.0)  # capped all along


@pytest.mark.parametrize(("threshold", "start", "goal", "length", "expected"), [
    (80.0, 85.0, 90.0, 10.0, 10.0),  # above all along
    (80.0, 60.0, 70.0, 10.0, 0.0),  # never reaches it
    (80.0, 60.0, 100.0, 1000.0, 1000.0 - 60.0 * math.log(2.0)),  # crosses upward at tau ln 2
    (80.0, 100.0, 60.0, 1000.0, 60.0 * math.log(2.0)),  # cools through it
    (80.0, 100.0, 60.0, 10.0, 10.0),  # still above at the end
])
def test_time_above_a_threshold(threshold: float, start: float, goal: float, length: float,
                                expected: float) -> None:
    assert time_above(threshold, start, goal, 60.0, length) == pytest.approx(expected)
