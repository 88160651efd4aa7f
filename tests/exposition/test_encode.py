"""The fast encoder writes exactly what prometheus_client's encoders write."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from prometheus_client.utils import floatToGoString

from exporter import metrics as cat
from exporter.exposition import snapshot_families
from exporter.exposition.encode import EOF, Families, FastEncoder, format_value
from exporter.exposition.families import FamilyData, family
from exporter.exposition.render import negotiate
from exporter.metrics import Group
from exporter.snapshot import PodRef
from exporter.state import ExpositionOptions
from tests.exposition import factory as f

ACCEPTS = (
    None,
    "text/plain; version=0.0.4",
    "text/plain; version=1.0.0; escaping=allow-utf-8",
    "text/plain; version=1.0.0; escaping=dots",
    "application/openmetrics-text",
    "application/openmetrics-text; version=1.0.0; escaping=allow-utf-8",
    "application/openmetrics-text; version=1.0.0; escaping=values",
    "application/openmetrics-text; version=2.0.0",
)

ODD_VALUES = ('quote"d', "back\\slash", "new\nline", "braces{0}}{", "ünï €", "", "a=b,c")


def _reference(encoder: object, content_type: str, data: list[FamilyData]) -> str:
    out = encoder(Families([d.to_family() for d in data])).decode()  # type: ignore[operator]
    return out.removesuffix(EOF) if content_type.startswith("application/openmetrics") else out


def _odd_snapshot() -> f.Snapshot:
    procs = tuple(
        f.process(
            100 + i,
            (i + 1) * 2**40 + 1,
            user="alice",
            name=name,
            utilization=[0.0, 1.0, 1e-9, 0.123456789, None][i % 5],
            pod=PodRef(pod_uid="u", namespace=name, pod=name, container=None),
        )
        for i, name in enumerate(ODD_VALUES)
    )
    odd_gpu = f.reading(
        1,
        procs,
        temperature_celsius=math.inf,
        power_usage_watts=-math.inf,
        fan_speed_ratio=math.nan,
        memory_used_bytes=2**62 + 1,
        sm_clock_hertz=1e21,
    )
    return f.snapshot(f.reading(0), odd_gpu, hostname='h"o\\st\n', driver_version="ü")


@pytest.mark.parametrize("accept", ACCEPTS)
@pytest.mark.parametrize("kube", [False, True])
def test_byte_identical_to_prometheus_client(accept: str | None, kube: bool) -> None:
    encoder, content_type = negotiate(accept)
    options = ExpositionOptions(groups=frozenset(Group), kubernetes_labels=kube)
    for snap in (_odd_snapshot(), f.fleet(3, 5), f.snapshot()):
        data = snapshot_families(snap, options)
        fast = FastEncoder(encoder, content_type.startswith("application/openmetrics"))
        expected = _reference(encoder, content_type, data)
        assert fast.encode(data) == expected
        assert fast.encode(data) == expected  # again, from cached templates


def test_every_catalogue_metric_gets_a_template() -> None:
    encoder, content_type = negotiate(None)
    fast = FastEncoder(encoder, False)
    for metric in cat.CATALOGUE:
        data = family(metric)
        data.add(tuple(f"v{i}" for i in range(len(metric.labels))), 2.5)
        assert fast.encode([data]) == _reference(encoder, content_type, [data])
    assert not any(isinstance(t, str) for t in fast._templates.values())


def test_label_value_with_the_probe_marker_is_encoded_like_prometheus_client() -> None:
    encoder, content_type = negotiate("application/openmetrics-text")
    data = family(cat.GPU_UP)
    data.add(("0", "uuid\x00with-nul"), 1.0)
    fast = FastEncoder(encoder, True)
    assert fast.encode([data]) == _reference(encoder, content_type, [data])


def test_format_value_equals_float_to_go_string() -> None:
    rng = random.Random(7)
    values: list[float] = [0, -0.0, 1, -1, math.inf, -math.inf, math.nan, 1e21, 5e-324, 2**62 + 1]
    for _ in range(20_000):
        values.append(rng.uniform(-1, 1) * 10 ** rng.randint(-30, 30))
        values.append(rng.randint(0, 2**64))
    for v in values:
        assert format_value(v) == floatToGoString(v), v


@pytest.mark.parametrize("accept", [None, "application/openmetrics-text"])
def test_reused_lines_follow_changing_snapshots(accept: str | None) -> None:
    encoder, content_type = negotiate(accept)
    fast = FastEncoder(encoder, content_type.startswith("application/openmetrics"))
    options = ExpositionOptions(groups=frozenset(Group))
    base = f.fleet(2, 3)
    gpu0, gpu1 = base.gpus
    changes = [
        base,
        base,  # identical: every line reused
        replace(base, gpus=(f.with_values(gpu0, temperature_celsius=-0.0), gpu1)),
        replace(base, gpus=(f.with_values(gpu0, temperature_celsius=0.0), gpu1)),
        replace(base, gpus=(f.with_values(gpu0, temperature_celsius=-0.0), gpu1)),  # equal rows
        replace(base, gpus=(replace(f.with_values(gpu0, temperature_celsius=math.nan),
                                    processes=()), gpu1)),
        replace(base, gpus=(gpu1,)),
        base,
    ]
    for snap in changes:
        data = snapshot_families(snap, options)
        assert fast.encode(data) == _reference(encoder, content_type, data)
    # only the last call's lines are kept
    kept = sum(len(lines) for lines in fast._lines.values())
    assert 0 < kept <= sum(len(d.rows) for d in snapshot_families(base, options))


def test_families_without_a_template_use_the_real_encoder(monkeypatch: pytest.MonkeyPatch) -> None:
    encoder, content_type = negotiate("application/openmetrics-text")
    fast = FastEncoder(encoder, True)
    # What _derive answers when a format's sample line does not have the expected shape.
    monkeypatch.setattr(fast, "_derive", lambda data: "unused header")
    data = snapshot_families(f.fleet(2, 2), ExpositionOptions())
    assert fast.encode(data) == _reference(encoder, content_type, data)
