"""The prometheus_client collector: registration, catalogue conformance, parsers."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from exporter.attribution.workloads import select
from exporter.catalogue import metrics
from exporter.catalogue.metrics import Group, Kind
from exporter.catalogue.workloads import KUBERNETES
from exporter.exposition import ExporterCollector, build_registry
from exporter.state import ExporterState, ExpositionOptions
from tests.exposition import factory
from tests.exposition.parse import families, openmetrics_families

EVERYTHING = ExpositionOptions(groups=frozenset(Group), workload_labels=select("kubernetes"))


def test_registration_does_not_collect() -> None:
    calls: list[int] = []

    def get_state() -> ExporterState:
        calls.append(1)
        return factory.state(factory.fleet(1, 1))

    collector = ExporterCollector(get_state, EVERYTHING)
    assert collector.describe() == []
    registry = CollectorRegistry(auto_describe=True)
    registry.register(collector)
    assert calls == []
    generate_latest(registry)
    assert calls == [1]


def test_every_family_is_in_the_catalogue_with_its_help_and_type() -> None:
    state = factory.state(factory.fleet(2, 3), web_config_reload_successful=True)
    text = generate_latest(build_registry(lambda: state, EVERYTHING)).decode()
    found = families(text)
    ours = {name: fam for name, fam in found.items()
            if name.startswith((metrics.PREFIX, metrics.JOBSTATS_PREFIX))}
    # the text parser strips _total from counters and keeps _info on gauges
    by_parsed_name = {
        (m.family_name if m.kind is Kind.COUNTER else m.name): m for m in metrics.CATALOGUE
    }
    assert set(ours) == set(by_parsed_name), set(ours) ^ set(by_parsed_name)
    for name, fam in ours.items():
        metric = by_parsed_name[name]
        assert fam.documentation == metric.help
        expected = "counter" if metric.kind is Kind.COUNTER else "gauge"
        assert fam.type == expected, name
    others = set(found) - set(ours)
    assert others
    assert all(name.startswith("process_") for name in others)


def test_openmetrics_types_and_units_match_the_catalogue() -> None:
    state = factory.state(factory.fleet(2, 3), web_config_reload_successful=True)
    registry = CollectorRegistry()
    registry.register(ExporterCollector(lambda: state, EVERYTHING))
    found = openmetrics_families(generate_openmetrics(registry).decode())
    assert set(found) == {m.family_name for m in metrics.CATALOGUE}
    for metric in metrics.CATALOGUE:
        fam = found[metric.family_name]
        assert fam.type == metric.kind.value
        assert fam.unit == metric.unit
        assert fam.documentation == metric.help
        for sample in fam.samples:
            assert set(sample.labels) <= {*metric.labels, *KUBERNETES.labels}


def test_fresh_families_every_collect() -> None:
    processes = (factory.process(1, 10), factory.process(2, 20))
    current = [factory.state(factory.snapshot(factory.reading(0, processes)))]
    registry = build_registry(lambda: current[0], EVERYTHING, process_metrics=False)
    assert b'pid="2"' in generate_latest(registry)
    current[0] = factory.state(factory.snapshot(factory.reading(0, (factory.process(1, 10),))))
    assert b'pid="2"' not in generate_latest(registry)
