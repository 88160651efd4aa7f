"""OpenMetrics ``_created``: every counter series says when it started counting (except the
GPU's lifetime counters), the text format stays as it was, and a counter that starts mid-life
(a new user, pod or job) carries the start of its first interval."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from exporter.attribution.accounting import IdleAccounting
from exporter.attribution.workloads import select
from exporter.catalogue import metrics
from exporter.catalogue.metrics import Group, Kind, Since
from exporter.exposition import MetricsRenderer, snapshot_families
from exporter.sources.base import boot_time
from exporter.sources.nvml.source import NvmlSource
from exporter.state import ExpositionOptions
from tests.exposition import factory
from tests.exposition.parse import openmetrics_families
from tests.sources.fake_nvml import FakeNvml, h200

OM = "application/openmetrics-text; version=1.0.0"
OPTIONS = ExpositionOptions(groups=frozenset(Group), workload_labels=select("kubernetes"))


def _created(body: str) -> dict[str, set[float]]:
    """The ``_created`` values of each counter family of an OpenMetrics body."""
    found: dict[str, set[float]] = {}
    for name, family in openmetrics_families(body).items():
        if family.type == "counter":
            found[name] = {s.value for s in family.samples if s.name.endswith("_created")}
    return found


def test_every_counter_family_has_its_start_in_openmetrics_and_none_in_text() -> None:
    snapshot = factory.fleet(2, 4)
    state = factory.state(snapshot)
    renderer = MetricsRenderer(process_metrics=False)
    body = renderer.render(state, OPTIONS, OM, None)[0].decode()
    text = renderer.render(state, OPTIONS, None, None)[0].decode()
    assert "_created" not in text
    created = _created(body)
    counters = {row.family_name: row for row in metrics.CATALOGUE if row.kind is Kind.COUNTER}
    assert set(created) <= set(counters)
    for name, starts in created.items():
        since = counters[name].since
        if since is Since.LIFETIME:
            assert starts == set(), name
        elif since is Since.DRIVER:
            assert starts == {snapshot.booted_at}, name
        elif since is Since.EXPORTER:
            assert starts in ({snapshot.started_at}, {state.counting_since}), name
        else:  # per series: accounting rows, processes (checked below)
            assert starts, name
    assert created["gpu_energy_consumed_joules"] == {1_699_000_000.0}
    assert created["gpu_exporter_errors"] == {1_699_999_000.25}
    assert created["gpu_remapped_rows"] == set()


def test_a_user_who_appears_later_counts_from_the_start_of_their_first_interval() -> None:
    first = factory.snapshot(factory.reading(0, (factory.process(100, 1 << 30, user="alice"),)))
    later = replace(first, taken_at=first.taken_at + 15.0, gpus=(factory.reading(0, (
        factory.process(100, 1 << 30, user="alice"),
        factory.process(200, 2 << 30, user="bob", workload=factory.pod("ml", "job-1")))),))
    accounting = IdleAccounting(select("kubernetes"))
    accounting.enrich(first)
    snapshot = accounting.enrich(later)
    since = {row.user: row.since for row in snapshot.accounting}
    assert since == {"alice": first.taken_at, "bob": first.taken_at}
    held = next(f for f in snapshot_families(snapshot, OPTIONS)
                if f.metric is metrics.HELD_MEMORY_SECONDS)
    bob = held.rows.index(next(row for row in held.rows if row[0][0] == "bob"))
    assert held.rows[bob][1] == 15.0 * (2 << 30)  # its first increase, which _created keeps
    assert held.created is not None
    assert held.created[bob] == first.taken_at


def test_a_process_counts_its_own_counters_from_its_start() -> None:
    snapshot = factory.fleet(1, 4)
    families = {f.metric.name: f for f in snapshot_families(snapshot, OPTIONS)}
    ooms = families[metrics.TORCH_OOMS.name]
    starts = dict(families[metrics.PROCESS_START_TIME.name].rows)
    assert ooms.created == [starts[values] for values, _ in ooms.rows]


@pytest.mark.parametrize("groups", [frozenset(Group)])
def test_the_nvml_source_dates_driver_counters_to_the_boot(groups: frozenset[Group]) -> None:
    source = NvmlSource(hostname="h", nvml=FakeNvml([h200(0)]), watch_events=False)
    source.start()
    try:
        snapshot = source.collect(groups - {Group.XID})
    finally:
        source.close()
    assert snapshot.booted_at == psutil.boot_time()
    assert snapshot.started_at is not None
    assert snapshot.booted_at < snapshot.started_at <= snapshot.taken_at


def test_the_boot_time_comes_from_proc_stat_and_unreadable_is_unknown(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  1 2 3\nbtime 1796483574\nprocesses 42\n")
    assert boot_time(str(stat)) == 1796483574.0
    stat.write_text("cpu  1 2 3\n")
    assert boot_time(str(stat)) is None
    assert boot_time(str(tmp_path / "missing")) is None
