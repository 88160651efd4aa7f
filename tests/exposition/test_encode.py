"""Golden output: the encoder writes exactly what prometheus_client's encoders write.

Every family type (gauge, counter, info; with and without labels and units), every escaping
case (label values and help with backslash, newline, double quote, braces, non-ASCII), odd
numbers (inf, nan, -0.0, huge, tiny, big integers) and every Accept header prometheus_client
distinguishes are compared byte for byte.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from prometheus_client.utils import floatToGoString

from exporter.attribution.workloads import select
from exporter.catalogue import metrics
from exporter.catalogue.metrics import Group
from exporter.exposition import snapshot_families
from exporter.exposition.encode import EOF, Encoder, encode, escaping_of, format_value
from exporter.exposition.families import FamilyData, family
from exporter.exposition.render import negotiate
from exporter.state import ExpositionOptions
from tests.exposition import factory

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


class _Registry:
    def __init__(self, data: list[FamilyData], created: bool) -> None:
        self.data = data
        self.created = created

    def collect(self) -> list[object]:
        return [d.to_family(self.created) for d in self.data]


def _reference(encoder: object, content_type: str, data: list[FamilyData]) -> str:
    """What prometheus_client writes (counters with ``_created`` in OpenMetrics)."""
    openmetrics = content_type.startswith("application/openmetrics")
    out = encoder(_Registry(data, openmetrics)).decode()  # type: ignore[operator]
    return out.removesuffix(EOF) if openmetrics else out


def _odd_snapshot() -> factory.Snapshot:
    procs = tuple(
        factory.process(
            100 + i,
            (i + 1) * 2**40 + 1,
            user="alice",
            name=name,
            utilization=[0.0, 1.0, 1e-9, 0.123456789, None][i % 5],
            workload=factory.pod(name, name),
        )
        for i, name in enumerate(ODD_VALUES)
    )
    odd_gpu = factory.reading(
        1,
        procs,
        temperature_celsius=math.inf,
        power_usage_watts=-math.inf,
        fan_speed_ratio=math.nan,
        memory_used_bytes=2**62 + 1,
        sm_clock_hertz=1e21,
    )
    return factory.snapshot(factory.reading(0), odd_gpu, hostname='h"o\\st\n', driver_version="ü")


@pytest.mark.parametrize("accept", ACCEPTS)
@pytest.mark.parametrize("kube", [False, True])
def test_byte_identical_to_prometheus_client(accept: str | None, kube: bool) -> None:
    encoder, content_type = negotiate(accept)
    options = ExpositionOptions(groups=frozenset(Group),
                                workload_labels=select(*["kubernetes"][:kube]))
    for snap in (_odd_snapshot(), factory.fleet(3, 5), factory.snapshot()):
        data = snapshot_families(snap, options)
        openmetrics = content_type.startswith("application/openmetrics")
        cached = Encoder(content_type)
        expected = _reference(encoder, content_type, data)
        escaping = escaping_of(content_type)
        assert "".join(encode(d, openmetrics, escaping) for d in data) == expected
        assert cached.encode(data) == expected
        assert cached.encode(data) == expected  # again, reusing the previous call's texts


ODD_HELP = 'help with "quotes", a back\\slash and a\nnewline'


@pytest.mark.parametrize("accept", ACCEPTS)
@pytest.mark.parametrize("metric", metrics.CATALOGUE, ids=lambda m: m.name)
def test_every_row_and_escaping_case(accept: str | None, metric: metrics.Metric) -> None:
    encoder, content_type = negotiate(accept)
    openmetrics = content_type.startswith("application/openmetrics")
    odd = replace(metric, help=ODD_HELP)
    for row in (metric, odd):
        data = family(row)
        width = len(row.labels)
        for i, text in enumerate(ODD_VALUES):
            data.add(tuple(f"{text}{j}" for j in range(width)), [2.5, -0.0, 1e21, 7][i % 4])
        if not width:
            data.rows[1:] = []
        got = encode(data, openmetrics, escaping_of(content_type))
        assert got == _reference(encoder, content_type, [data])


def test_format_value_equals_float_to_go_string() -> None:
    rng = random.Random(7)
    values: list[float] = [0, -0.0, 1, -1, math.inf, -math.inf, math.nan, 1e21, 5e-324, 2**62 + 1]
    for _ in range(20_000):
        values.append(rng.uniform(-1, 1) * 10 ** rng.randint(-30, 30))
        values.append(rng.randint(0, 2**64))
    for v in values:
        assert format_value(v) == floatToGoString(v), v


@pytest.mark.parametrize("accept", [None, "application/openmetrics-text"])
def test_reused_texts_follow_changing_snapshots(accept: str | None) -> None:
    encoder, content_type = negotiate(accept)
    cached = Encoder(content_type)
    options = ExpositionOptions(groups=frozenset(Group))
    base = factory.fleet(2, 3)
    gpu0, gpu1 = base.gpus
    changes = [
        base,
        base,  # identical: every family text reused
        replace(base, gpus=(factory.with_values(gpu0, temperature_celsius=-0.0), gpu1)),
        replace(base, gpus=(factory.with_values(gpu0, temperature_celsius=0.0), gpu1)),
        # equal rows
        replace(base, gpus=(factory.with_values(gpu0, temperature_celsius=-0.0), gpu1)),
        replace(base, gpus=(replace(factory.with_values(gpu0, temperature_celsius=math.nan),
                                    processes=()), gpu1)),
        replace(base, gpus=(gpu1,)),
        base,
    ]
    previous: list[str] = []
    for index, snap in enumerate(changes):
        data = snapshot_families(snap, options)
        parts = cached.encode_parts(data)
        assert "".join(parts) == _reference(encoder, content_type, data)
        if index == 1:  # the same snapshot again: the very same texts (gzip chunks reused)
            assert all(a is b for a, b in zip(parts, previous, strict=True))
        previous = parts


