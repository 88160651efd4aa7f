"""Parse exposition output back into samples, with prometheus_client's own parsers."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric as Family
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families
from prometheus_client.parser import text_string_to_metric_families

from exporter.exposition import ExporterCollector
from exporter.state import ExporterState, ExpositionOptions

Key = tuple[str, frozenset[tuple[str, str]]]


def _by_name(parsed: Iterable[Family]) -> dict[str, Family]:
    """Parsed families by name; a name seen twice fails the test."""
    found: dict[str, Family] = {}
    for family in parsed:
        assert family.name not in found, f"duplicate family {family.name}"
        found[family.name] = family
    return found


def families(text: str) -> dict[str, Family]:
    """Text 0.0.4 families by name (as the text parser names them)."""
    return _by_name(text_string_to_metric_families(text))


def openmetrics_families(text: str) -> dict[str, Family]:
    """OpenMetrics families by name; the parser rejects a body without a single final EOF."""
    return _by_name(om_families(text))


def samples(text: str) -> dict[Key, float]:
    """Every sample of a text 0.0.4 body: (sample name, label set) -> value."""
    out: dict[Key, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in out, f"duplicate series {key}"
            out[key] = sample.value
    return out


def series(text: str, name: str) -> list[dict[str, str]]:
    """Label sets of every sample called ``name``."""
    return [dict(labels) for (n, labels) in samples(text) if n == name]


def value(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample ``name`` whose labels include ``labels`` (exactly one)."""
    matches = [
        v
        for (n, ls), v in samples(text).items()
        if n == name and set(labels.items()) <= set(ls)
    ]
    assert len(matches) <= 1, f"{name} {labels}: {len(matches)} matches"
    return matches[0] if matches else None


def collect_text(state: ExporterState, options: ExpositionOptions) -> str:
    """Text 0.0.4 from a plain registry holding only the exporter collector."""
    registry = CollectorRegistry()
    registry.register(ExporterCollector(lambda: state, options))
    return generate_latest(registry).decode()
