"""MetricsRenderer: negotiation, gzip, cache per snapshot, fresh self metrics, threads."""

from __future__ import annotations

import gzip
import threading
import zlib
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST

from exporter.attribution.workloads import select
from exporter.catalogue import metrics
from exporter.exposition import ExporterCollector, MetricsRenderer
from exporter.exposition.render import MAX_CACHED_FORMATS, stored_blocks
from exporter.state import ExporterState, ExpositionOptions
from tests.exposition import factory
from tests.exposition.parse import openmetrics_families, samples, series, value

OM = "application/openmetrics-text; version=1.0.0"
OPTIONS = ExpositionOptions(workload_labels=select("kubernetes"))


def _uncached(state: ExporterState, accept: str | None) -> bytes:
    registry = CollectorRegistry()
    encoder, content_type = choose_encoder(accept or "")
    openmetrics = content_type.startswith("application/openmetrics")
    registry.register(ExporterCollector(lambda: state, OPTIONS, created=openmetrics))
    return encoder(registry)


@pytest.mark.parametrize("accept", [None, "*/*", OM, "text/plain; version=1.0.0"])
def test_body_equals_one_registry_encoding(accept: str | None) -> None:
    renderer = MetricsRenderer(process_metrics=False)
    state = factory.state(factory.fleet(2, 4))
    for _ in range(2):  # cold, then cached
        body, headers = renderer.render(state, OPTIONS, accept, None)
        assert body == _uncached(state, accept)
        assert headers["Content-Type"] == choose_encoder(accept or "")[1]
        assert "Content-Encoding" not in headers


def test_openmetrics_body_has_one_eof_at_the_end_and_parses() -> None:
    body, headers = MetricsRenderer().render(factory.state(factory.fleet(2, 3)), OPTIONS, OM, "")
    assert headers["Content-Type"].startswith(CONTENT_TYPE_LATEST)
    text = body.decode()
    assert text.endswith("# EOF\n")
    assert text.count("# EOF") == 1
    found = openmetrics_families(text)  # raises on anything after EOF or duplicates
    assert metrics.GPU_INFO.family_name in found
    assert metrics.DATA_AGE.name in found
    assert "process_cpu_seconds" in found


def test_text_is_default_and_includes_process_metrics() -> None:
    body, headers = MetricsRenderer().render(factory.state(factory.fleet(1, 1)), OPTIONS)
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = body.decode()
    assert value(text, "process_resident_memory_bytes") is not None
    assert "python_gc_objects_collected_total" not in text
    assert "python_info" not in text


def test_process_metrics_are_read_at_most_once_a_second() -> None:
    now = [100.0]
    renderer = MetricsRenderer(clock=lambda: now[0])
    reads: list[int] = []
    collect = renderer._process.collect  # type: ignore[union-attr]

    def counted() -> object:
        reads.append(1)
        return collect()

    renderer._process.collect = counted  # type: ignore[union-attr,method-assign]
    state = factory.state(factory.fleet(1, 1))
    first = renderer.render(state, OPTIONS)[0]
    now[0] += 0.5
    assert renderer.render(state, OPTIONS)[0] == first
    assert renderer.render(state, OPTIONS, OM)[0] != first  # each format encodes its own
    assert len(reads) == 2
    now[0] += 0.6  # 1.1 s after the first read: read again
    renderer.render(state, OPTIONS)
    assert len(reads) == 3


@pytest.mark.parametrize("process_metrics", [False, True])
@pytest.mark.parametrize("accept", [None, OM])
def test_gzip_round_trip(accept: str | None, process_metrics: bool) -> None:
    # A frozen clock: process_* are read once, the same figures in every body.
    renderer = MetricsRenderer(process_metrics=process_metrics, clock=lambda: 0.0)
    state = factory.state(factory.fleet(2, 4))
    plain, _ = renderer.render(state, OPTIONS, accept, None)
    for encoding in ("gzip", "br;q=1.0, gzip;q=0.8", "GZIP"):
        body, headers = renderer.render(state, OPTIONS, accept, encoding)
        assert headers["Content-Encoding"] == "gzip"
        assert body[:2] == b"\x1f\x8b"
        assert gzip.decompress(body) == plain
    identity, headers = renderer.render(state, OPTIONS, accept, "br, deflate")
    assert "Content-Encoding" not in headers
    assert identity == plain


def test_data_age_is_fresh_while_the_snapshot_part_is_cached() -> None:
    renderer = MetricsRenderer(process_metrics=False)
    snap = factory.fleet(2, 2)
    for gz in (None, "gzip"):
        for age in (1.0, 7.25, 30.5):
            body, _ = renderer.render(factory.state(snap, age=age), OPTIONS, None, gz)
            text = (gzip.decompress(body) if gz else body).decode()
            assert value(text, metrics.DATA_AGE.name) == age
            assert value(text, metrics.GPU_UP.name, gpu="1") == 1
        # errors_total is read from each state too
        errors = {"gpu_lost": 5}
        body, _ = renderer.render(factory.state(snap, errors_total=errors), OPTIONS, None, gz)
        text = (gzip.decompress(body) if gz else body).decode()
        assert value(text, metrics.ERRORS.name, kind="gpu_lost") == 5


def test_new_snapshot_invalidates_cache_and_exited_processes_vanish() -> None:
    renderer = MetricsRenderer(process_metrics=False)
    both = factory.snapshot(factory.reading(0, (factory.process(1, 10), factory.process(2, 20))))
    first, _ = renderer.render(factory.state(both), OPTIONS)
    assert {s["pid"] for s in series(first.decode(), metrics.PROCESS_MEMORY.name)} == {"1", "2"}
    # Process 2 exited; an equal-looking but new snapshot object must not hit the cache.
    one = replace(both, gpus=(factory.reading(0, (factory.process(1, 10),)),))
    for gz in (None, "gzip"):
        body, _ = renderer.render(factory.state(one), OPTIONS, None, gz)
        text = (gzip.decompress(body) if gz else body).decode()
        assert {s["pid"] for s in series(text, metrics.PROCESS_MEMORY.name)} == {"1"}
        assert value(text, metrics.PROCESSES.name) == 1
    # A different value in an otherwise identical snapshot is seen at once.
    hotter = replace(one, gpus=(factory.reading(0, temperature_celsius=90.0),))
    body, _ = renderer.render(factory.state(hotter), OPTIONS)
    assert value(body.decode(), metrics.TEMPERATURE.name) == 90.0


def test_changed_options_invalidate_the_cache() -> None:
    renderer = MetricsRenderer(process_metrics=False)
    state = factory.state(factory.snapshot(factory.reading(0, (factory.process(1, 10),))))
    with_pid, _ = renderer.render(state, OPTIONS)
    without, _ = renderer.render(state, replace(OPTIONS, pid_label=False))
    assert "pid" in series(with_pid.decode(), metrics.PROCESS_MEMORY.name)[0]
    assert "pid" not in series(without.decode(), metrics.PROCESS_MEMORY.name)[0]


def test_odd_accept_headers_fall_back_to_text() -> None:
    renderer = MetricsRenderer(process_metrics=False)
    state = factory.state(factory.fleet(1, 2))
    expected, _ = renderer.render(state, OPTIONS)
    for accept in ("application/openmetrics-text; version=abc", "garbage;;;", "", "\x00"):
        body, headers = renderer.render(state, OPTIONS, accept, None)
        assert headers["Content-Type"].startswith("text/plain")
        assert body == expected


def test_many_distinct_formats_stay_bounded_and_correct() -> None:
    renderer = MetricsRenderer(process_metrics=False)
    state = factory.state(factory.fleet(1, 2))
    for minor in range(MAX_CACHED_FORMATS * 3):
        accept = f"application/openmetrics-text; version=1.{minor}.0"
        body, _ = renderer.render(state, OPTIONS, accept, None)
        assert body == _uncached(state, accept)
    entry = renderer._entry
    assert entry is not None
    assert len(entry.bodies) <= MAX_CACHED_FORMATS
    assert len(renderer._encoders) <= MAX_CACHED_FORMATS


def test_concurrent_scrapes_of_changing_snapshots_are_consistent() -> None:
    renderer = MetricsRenderer(process_metrics=False)
    states = [factory.state(factory.fleet(2, n), age=float(n)) for n in range(1, 5)]
    expected = {n: _uncached(s, None) for n, s in enumerate(states)}
    failures: list[str] = []

    def scrape(worker: int) -> None:
        for i in range(40):  # bounded
            n = (worker + i) % len(states)
            body, _ = renderer.render(states[n], OPTIONS, None, "gzip" if i % 2 else None)
            plain = gzip.decompress(body) if i % 2 else body
            if plain != expected[n]:
                failures.append(f"worker {worker} round {i}")

    threads = [threading.Thread(target=scrape, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not failures
    assert all(not t.is_alive() for t in threads)


def test_invalid_gzip_level_is_rejected() -> None:
    with pytest.raises(ValueError, match="gzip_level"):
        MetricsRenderer(gzip_level=11)


def test_rendered_series_are_unique() -> None:
    body, _ = MetricsRenderer().render(factory.state(factory.fleet(2, 8)), OPTIONS)
    assert samples(body.decode())  # the parser helper asserts uniqueness


def _one_member(body: bytes) -> bytes:
    """The content of ``body``, which must be exactly one complete gzip member."""
    inflater = zlib.decompressobj(31)
    content = inflater.decompress(body)
    assert inflater.eof
    assert inflater.unused_data == b""
    return content


@pytest.mark.parametrize("accept", [None, OM])
def test_gzip_chunks_of_unchanged_families_are_reused_across_snapshots(
    accept: str | None,
) -> None:
    renderer = MetricsRenderer(process_metrics=False, gzip_level=1)  # process_* move
    base = factory.fleet(2, 3)
    gpu0, gpu1 = base.gpus
    hotter = replace(base, gpus=(factory.with_values(gpu0, temperature_celsius=91.0), gpu1))
    signed = replace(base, gpus=(factory.with_values(gpu0, temperature_celsius=-0.0), gpu1))
    zero = replace(base, gpus=(factory.with_values(gpu0, temperature_celsius=0.0), gpu1))
    reused = []
    for snap in (base, replace(base), hotter, signed, zero, base):
        state = factory.state(snap)
        before = dict(renderer._chunks)
        body, headers = renderer.render(state, OPTIONS, accept, "gzip")
        assert headers["Content-Encoding"] == "gzip"
        plain, _ = renderer.render(state, OPTIONS, accept, None)
        assert _one_member(body) == plain  # plain bodies are checked against the encoders
        reused.append(sum(1 for key, item in renderer._chunks.items()
                          if before.get(key) is item))
    families = len(renderer._chunks)
    assert reused[1] == families  # an equal snapshot: every chunk reused
    assert 0 < reused[2] < families  # one temperature changed: only its family redone
    assert reused[4] < families  # -0.0 -> 0.0: equal values, different text


@pytest.mark.parametrize("size", [0, 1, 0xFFFF, 0xFFFF + 1, 150_000])
def test_stored_blocks_inflate_back_to_the_data(size: int) -> None:
    data = bytes(i % 251 for i in range(size))
    blocks = stored_blocks(data)
    assert len(blocks) == size + 5 * -(-size // 0xFFFF)  # a 5-byte header per 64 KiB
    assert zlib.decompress(blocks + b"\x03\x00", -15) == data  # with the empty final block


def test_render_cached_serves_only_what_is_rendered_already() -> None:
    renderer = MetricsRenderer(process_metrics=False)
    state = factory.state(factory.fleet(2, 4))
    assert renderer.render_cached(state, OPTIONS, OM, None) is None
    plain = renderer.render(state, OPTIONS, OM, None)
    assert renderer.render_cached(state, OPTIONS, OM, None) == plain
    assert renderer.render_cached(state, OPTIONS, OM, "gzip") is None  # no chunks yet
    compressed = renderer.render(state, OPTIONS, OM, "gzip")
    assert renderer.render_cached(state, OPTIONS, OM, "gzip") == compressed
    newer = factory.state(factory.fleet(2, 4))
    assert newer.snapshot is not state.snapshot
    assert renderer.render_cached(newer, OPTIONS, OM, None) is None

