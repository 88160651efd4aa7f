"""Every metric row reaches every output it should: a new row cannot be half wired.

Outputs: the NVML source (rows with ``nvml``, against the fake NVML), the simulated source
(rows in its table, ``exporter.sources.simulated.rows``), the exposition, the JSON model, the
docs' metric table and the shipped dashboards (rows with ``charted``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.attribution.accounting import IdleAccounting
from exporter.attribution.torchtotals import TorchUserTotals
from exporter.attribution.workloads import every_kind
from exporter.catalogue import metrics
from exporter.catalogue.metrics import SWITCHABLE_GROUPS, Group, Metric, Scope
from exporter.exposition.json_model import GpuModel, ProcessModel
from exporter.snapshot import GpuReading
from exporter.sources.nvml.source import NvmlSource
from exporter.sources.simulated.rows import SIMULATE
from exporter.sources.simulated.scenario import list_presets, load_scenario
from exporter.sources.simulated.source import SimulatedSource
from exporter.state import ExpositionOptions
from tests.exposition import factory
from tests.exposition.parse import collect_text, series
from tests.sources.fake_nvml import FakeProcess, FakeSample
from tests.sources.fake_nvml_health import FakeHealthGpu, FakeHealthNvml, h200_health

ROOT = Path(__file__).resolve().parents[2]
ALL = frozenset(SWITCHABLE_GROUPS)
IDS = [row.name for row in metrics.CATALOGUE]


def _name(row: Metric) -> str:
    return row.name


def _has(reading: GpuReading, row: Metric) -> bool:
    return row.name in reading.values


def _every_field_gpu() -> FakeHealthGpu:
    """An H200-like fake GPU answering every call (pages retire too, as on older GPUs)."""
    return h200_health(0, unsupported=set(), retired_pages={0: [], 1: []}, nvlink=True)


def test_names_are_unique_and_prefixed() -> None:
    assert len(set(IDS)) == len(IDS)
    # The jobstats group serves a peer's names on purpose (its tools query them).
    assert all(row.name.startswith(metrics.JOBSTATS_PREFIX if row.group is Group.JOBSTATS
                                   else metrics.PREFIX) for row in metrics.CATALOGUE)


@pytest.mark.parametrize("row", [r for r in metrics.GPU_ROWS if r.nvml is not None], ids=_name)
def test_nvml_rows_are_read(row: Metric) -> None:
    fake = FakeHealthNvml([_every_field_gpu()])
    source = NvmlSource(hostname="h", nvml=fake)
    source.start()
    try:
        source.collect(ALL)  # GPM rows report the window since the previous collection
        reading = source.collect(ALL).gpus[0]
        assert _has(reading, row), f"{row.name}: the NVML source (or the fake) does not read it"
        assert not _has(source.collect(ALL - {row.group}).gpus[0], row)
    finally:
        source.close()  # stops the XID event waiter's threads


def test_the_simulator_fills_per_gpu_rows_only() -> None:
    assert set(SIMULATE) <= {row.name for row in metrics.GPU_ROWS}


@pytest.mark.parametrize("row", [metrics.BY_NAME[name] for name in SIMULATE], ids=_name)
def test_simulated_rows_appear_in_some_preset(row: Metric) -> None:
    readings = []
    for preset in list_presets():
        source = SimulatedSource(load_scenario(preset), clock=lambda: 1_000.0)
        readings += source.collect(ALL).gpus
    assert any(_has(r, row) for r in readings), f"{row.name}: no preset simulates it"


def _exposed_names() -> set[str]:
    """Rows with series in /metrics (every group on) from the fake NVML or any preset."""
    fake = FakeHealthNvml([_every_field_gpu()])
    fake.gpus[0].compute = [FakeProcess(pid=100, used_memory=1 << 30)]
    fake.gpus[0].samples = [FakeSample(pid=100, timestamp=10, sm=50)]
    nvml = NvmlSource(hostname="h", nvml=fake)
    nvml.start()
    snapshots = [nvml.collect(ALL)]
    nvml.close()
    for preset in list_presets():
        now = [1_000.0]
        source = SimulatedSource(load_scenario(preset), clock=lambda now=now: now[0])
        accounting, totals = IdleAccounting(), TorchUserTotals()  # as the CLI chains them
        accounting.enrich(totals.enrich(source.collect(ALL)))
        now[0] += 10.0  # a second collection: accounting needs an interval
        snapshots.append(accounting.enrich(totals.enrich(source.collect(ALL))))
    snapshots.append(factory.fleet(1, 2))  # processes in pods: the workload families
    options = ExpositionOptions(groups=frozenset(Group), workload_labels=every_kind())
    names: set[str] = set()
    for snapshot in snapshots:
        text = collect_text(factory.state(snapshot, web_config_reload_successful=True), options)
        names |= {row.name for row in metrics.CATALOGUE if series(text, row.name)}
    return names


@pytest.mark.parametrize("row", metrics.CATALOGUE, ids=_name)
def test_every_row_is_exposed(row: Metric) -> None:
    assert row.name in EXPOSED, f"{row.name}: not in /metrics with every group on"


@pytest.mark.parametrize("row", [r for r in metrics.CATALOGUE if r.json_field], ids=_name)
def test_json_rows_are_fields(row: Metric) -> None:
    assert row.json_field is not None
    model = ProcessModel if row.scope is Scope.PROCESS else GpuModel
    names = ([row.json_field.format(v) for v in row.label_values]
             if "{}" in row.json_field else [row.json_field])
    for name in names:
        assert name in model.model_fields, f"{row.name}: {name} missing from {model.__name__}"


def test_per_gpu_and_per_process_rows_have_json_fields() -> None:
    missing = [r.name for r in (*metrics.GPU_ROWS, *metrics.PROCESS_ROWS) if not r.json_field]
    assert missing == []


@pytest.mark.parametrize("row", metrics.CATALOGUE, ids=_name)
def test_every_row_is_in_the_docs_metric_table(row: Metric) -> None:
    assert f"| `{row.name}` |" in METRICS_DOC


@pytest.mark.parametrize("row", [r for r in metrics.CATALOGUE if r.charted], ids=_name)
def test_charted_rows_are_on_a_dashboard(row: Metric) -> None:
    assert row.name in DASHBOARDS or row.family_name in DASHBOARDS, (
        f"{row.name}: on no dashboard (chart it, or declare it charted=False)")


EXPOSED = _exposed_names()
METRICS_DOC = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
DASHBOARDS = "".join(p.read_text(encoding="utf-8")
                     for p in sorted((ROOT / "dashboards" / "grafana").glob("*.json")))
