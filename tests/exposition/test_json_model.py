"""The /api/v1/snapshot model."""

from __future__ import annotations

import json
from dataclasses import replace

from fastapi import FastAPI

from exporter.catalogue.metrics import Group
from exporter.exposition.json_model import SnapshotResponse
from exporter.snapshot import ProcessOwner
from exporter.state import ExpositionOptions, default_groups
from tests.exposition import factory

MIB = 1024**2


def _state() -> factory.ExporterState:
    pod = factory.pod("ml", "train", "main", uid="u1", container_id="c1")
    secret = replace(
        factory.process(8, 5 * MIB, user="bob"),
        owner=ProcessOwner(uid=1001, user="bob", name="python", start_time_seconds=5.0,
                           cmdline="python train.py"),
    )
    procs = (factory.process(7, 10 * MIB, workload=pod), secret,
             factory.process(9, None, user=None))
    snap = factory.snapshot(
        factory.reading(1, fan_speed_ratio=None),
        factory.reading(0, procs),
        factory.reading(2, up=False, error="GPU is lost", memory_used_bytes=None),
        errors={"gpu_lost": 1},
    )
    return factory.state(snap, age=2.0, stale=True, errors_total={"gpu_lost": 3})


def test_mirrors_the_snapshot() -> None:
    model = SnapshotResponse.from_state(_state(), ExpositionOptions())
    assert (model.source, model.hostname, model.stale) == ("simulated", "node-1", True)
    assert model.data_age_seconds == 2.0
    assert model.errors == {"gpu_lost": 1}
    assert model.errors_total == {"gpu_lost": 3}
    assert [g.index for g in model.gpus] == [0, 1, 2]
    gpu0, gpu1, gpu2 = model.gpus
    assert gpu0.memory_used_bytes == 40 * factory.GIB
    assert gpu0.memory_total_bytes == 141 * factory.GIB
    assert gpu0.throttle_reasons == {"gpu_idle": False, "sw_power_cap": True}
    assert gpu0.ecc is not None
    assert gpu0.ecc["corrected"] == 3
    assert gpu1.fan_speed_ratio is None
    assert gpu2.up is False
    assert gpu2.error == "GPU is lost"
    assert gpu2.memory_used_bytes is None
    in_pod, with_cmd, unknown = gpu0.processes
    assert in_pod.pod is not None
    assert in_pod.pod.namespace == "ml"
    assert (in_pod.user, in_pod.uid, in_pod.process_name) == ("alice", 1000, "python")
    assert in_pod.cmdline is None
    assert with_cmd.cmdline == "python train.py"
    assert unknown.user is None
    assert unknown.used_memory_bytes is None
    assert unknown.pod is None
    # energy and PCIe are opt-in groups: hidden like on /metrics
    assert gpu0.energy_joules is None
    assert gpu0.pcie_rx_bytes_per_second is None


def test_switched_off_groups_are_hidden() -> None:
    groups = default_groups() - {Group.PROCESSES, Group.TEMPERATURE}
    model = SnapshotResponse.from_state(_state(), ExpositionOptions(groups=groups))
    assert all(g.processes == [] for g in model.gpus)
    assert all(g.temperature_celsius is None for g in model.gpus)
    everything = ExpositionOptions(groups=frozenset(Group))
    gpu0 = SnapshotResponse.from_state(_state(), everything).gpus[0]
    assert gpu0.energy_joules == 1.5e9
    assert gpu0.temperature_celsius == 61.0


def test_json_round_trip_and_openapi() -> None:
    state = _state()
    app = FastAPI()

    @app.get("/api/v1/snapshot", response_model=SnapshotResponse)
    def snapshot() -> SnapshotResponse:
        return SnapshotResponse.from_state(state, ExpositionOptions())

    model = snapshot()
    body = json.loads(model.model_dump_json())
    assert SnapshotResponse.model_validate(body) == model
    assert body["gpus"][0]["processes"][0]["type"] == "compute"
    assert body["gpus"][1]["fan_speed_ratio"] is None
    schema = app.openapi()["components"]["schemas"]
    assert "SnapshotResponse" in schema
    gpu = schema["GpuModel"]["properties"]
    assert "bytes" in gpu["memory_used_bytes"]["description"].lower()
    assert "celsius" in gpu["temperature_celsius"]["description"].lower()


def test_nan_reading_becomes_null() -> None:
    snap = factory.snapshot(factory.reading(0, temperature_celsius=float("nan")))
    model = SnapshotResponse.from_state(factory.state(snap), ExpositionOptions())
    assert json.loads(model.model_dump_json())["gpus"][0]["temperature_celsius"] is None
