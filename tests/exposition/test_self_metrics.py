"""The exporter's own metrics."""

from __future__ import annotations

import platform
from dataclasses import replace
from importlib import metadata

import exporter
from exporter.catalogue import metrics
from exporter.exposition import collection_success
from exporter.exposition.self_metrics import nvml_binding_version
from exporter.state import ExpositionOptions
from tests.exposition import factory
from tests.exposition.parse import collect_text, series, value


def test_build_info() -> None:
    text = collect_text(factory.state(factory.snapshot(factory.reading(0))), ExpositionOptions())
    (info,) = series(text, metrics.BUILD_INFO.name)
    assert info == {
        "version": exporter.__version__,
        "python_version": platform.python_version(),
        "nvml_binding_version": metadata.version("nvidia-ml-py"),
        "source": "simulated",
    }
    assert nvml_binding_version() == metadata.version("nvidia-ml-py")


def test_health_and_freshness() -> None:
    snap = factory.snapshot(factory.reading(0), duration_seconds=0.25)
    state = factory.state(snap, age=3.5, last_success_timestamp=1_700_000_000.5)
    text = collect_text(state, ExpositionOptions())
    assert value(text, metrics.SOURCE_UP.name, source="simulated") == 1
    assert value(text, metrics.COLLECTION_SUCCESS.name) == 1
    assert value(text, metrics.COLLECTION_DURATION.name) == 0.25
    assert value(text, metrics.LAST_SUCCESS.name) == 1_700_000_000.5
    assert value(text, metrics.DATA_AGE.name) == 3.5
    assert value(text, metrics.ERRORS.name, kind="garbled_process_entry") == 2


def test_last_success_left_out_before_the_first_success() -> None:
    state = factory.state(factory.snapshot(), last_success_timestamp=None, errors_total={})
    text = collect_text(state, ExpositionOptions())
    assert value(text, metrics.LAST_SUCCESS.name) is None
    assert series(text, metrics.ERRORS.name) == []
    assert value(text, metrics.DATA_AGE.name) == 1.5


def test_collection_success_needs_source_every_gpu_and_no_errors() -> None:
    good = factory.snapshot(factory.reading(0), factory.reading(1))
    assert collection_success(good)
    assert not collection_success(replace(good, source_up=False))
    one_lost = (factory.reading(0), factory.reading(1, up=False))
    assert not collection_success(replace(good, gpus=one_lost))
    assert not collection_success(replace(good, errors={"nvml_call": 1}))
    assert collection_success(replace(good, errors={"nvml_call": 0}))
    text = collect_text(factory.state(replace(good, errors={"gpu_lost": 1})), ExpositionOptions())
    assert value(text, metrics.COLLECTION_SUCCESS.name) == 0
