"""Simulated GPU health: parsing the scenario keys and the state at a simulated time."""

from __future__ import annotations

from typing import Any

import pytest

from exporter.health import MigProcess, RemappedRows, XidKey
from exporter.sources.simulated.health import (
    HealthSpec,
    XidInjection,
    mig_devices,
    parse_health,
    remapped_rows,
    retired_pages,
    xid_counts,
)
from exporter.sources.simulated.scenario_fields import GiB, Reader, ScenarioError

H200_BYTES = 150_754_820_096
GPU_KEYS = ("xids", "xid_events", "remapped_rows", "retired_pages", "mig")


def parse(data: dict[str, Any], remapping: bool = True) -> HealthSpec:
    return parse_health(Reader(data, "test.yaml", "gpus[0]", GPU_KEYS), H200_BYTES, remapping)


def test_defaults_are_a_healthy_gpu() -> None:
    spec = parse({})
    assert spec == HealthSpec()
    assert spec.mig is None
    assert spec.xid_events


def test_xid_counts_over_time_with_repeats_and_instances() -> None:
    spec = parse({"xids": [{"at": "30s", "code": 31, "count": 5, "every": "2s",
                            "gpu_instance": 7, "compute_instance": 0},
                           {"at": "10s", "code": 79}]})
    assert spec.xids[0] == XidInjection(at=10.0, code=79)  # sorted by time
    assert xid_counts(spec.xids, 5.0, 1000.0) == {}
    at_12 = xid_counts(spec.xids, 12.0, 1000.0)
    assert dict(at_12) == {XidKey(79): at_12[XidKey(79)]}
    assert at_12[XidKey(79)].count == 1
    assert at_12[XidKey(79)].last_seconds == 1010.0
    at_33 = xid_counts(spec.xids, 33.0, 1000.0)
    storm = at_33[XidKey(31, 7, 0)]
    assert (storm.count, storm.last_seconds) == (2, 1032.0)  # at 30 s and 32 s
    assert xid_counts(spec.xids, 1e6, 1000.0)[XidKey(31, 7, 0)].count == 5  # then it stops


def test_xids_before_the_start_are_not_counted() -> None:
    spec = parse({"xids": [{"at": "-5s", "code": 13, "count": 10, "every": "1s"},
                           {"at": "-1h", "code": 48}]})
    counts = xid_counts(spec.xids, 2.0, 0.0)
    assert counts[XidKey(13)].count == 3  # at 0, 1 and 2 s; the five before the start are not
    assert XidKey(48) not in counts


def test_remap_and_retired_states_follow_time() -> None:
    spec = parse({"remapped_rows": {"corrected": 2, "uncorrected": 1, "pending_from": "40s",
                                    "failure_from": "5m"}})
    assert remapped_rows(spec.remapped_rows, 10, mig_on=False) == RemappedRows(2, 1, False, False)
    assert remapped_rows(spec.remapped_rows, 41, mig_on=False) == RemappedRows(2, 1, True, False)
    assert remapped_rows(spec.remapped_rows, 301, mig_on=False) == RemappedRows(2, 1, True, True)
    assert remapped_rows(spec.remapped_rows, 41, mig_on=True) is None  # NVML: not with MIG on
    assert remapped_rows(None, 41, mig_on=False) is None
    old = parse({"retired_pages": {"single_bit": 3, "pending_from": 0}}, remapping=False)
    pages = retired_pages(old.retired_pages, 1)
    assert pages is not None
    assert (pages.single_bit, pages.double_bit, pages.pending) == (3, 0, True)


def test_mig_layout_memory_and_processes() -> None:
    spec = parse({"mig": [{"profile": "1g.18gb", "gpu_instance": 7},
                          {"profile": "3g.71gb", "gpu_instance": 2, "compute_instances": 2}]})
    assert spec.mig is not None
    procs = {(2, 1): [MigProcess(pid=10, used_memory_bytes=4 * GiB)]}
    devices = mig_devices(spec.mig, 0, procs)
    assert [(d.gpu_instance, d.compute_instance, d.profile) for d in devices] == [
        (2, 0, "3g.71gb"), (2, 1, "3g.71gb"), (7, 0, "1g.18gb")]
    assert devices[2].memory_total_bytes == 18 * GiB
    assert devices[0].memory_used_bytes == devices[1].memory_used_bytes  # one GI, shared memory
    assert devices[0].memory_used_bytes is not None
    assert devices[0].memory_used_bytes > 4 * GiB
    assert devices[1].processes == (MigProcess(pid=10, used_memory_bytes=4 * GiB),)
    assert len({d.uuid for d in devices}) == 3


@pytest.mark.parametrize(("data", "remapping", "message"), [
    ({"xids": [{"code": 13, "count": 3}]}, True, "every > 0"),
    ({"xids": [{"at": 1, "code": 0}]}, True, "code"),
    ({"xids": [{"at": 1, "code": 13, "pid": 4}]}, True, "unknown key 'pid'"),
    ({"remapped_rows": {"corrected": 1}}, False, "use retired_pages"),
    ({"retired_pages": {"single_bit": 1}}, True, "use remapped_rows"),
    ({"mig": [{"profile": "big"}]}, True, "profile such as 1g.18gb"),
    ({"mig": [{"profile": "1g.18gb", "gpu_instance": 1},
              {"profile": "1g.18gb", "gpu_instance": 1}]}, True, "appears twice"),
    ({"mig": [{"profile": "7g.141gb"}, {"profile": "7g.141gb"}]}, True, "exceeds"),
    ({"xid_events": "no"}, True, "true or false"),
])
def test_mistakes_are_one_clear_error(data: dict[str, Any], remapping: bool,
                                      message: str) -> None:
    with pytest.raises(ScenarioError, match=r"test\.yaml: gpus\[0\]") as caught:
        parse(data, remapping)
    assert message in str(caught.value)
