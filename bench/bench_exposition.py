"""Micro-benchmark of /metrics rendering for a synthetic 8 GPU x 32 process host.

Run from the repository root: ``.venv/bin/python bench/bench_exposition.py [--rounds N]``.
The snapshot comes from ``tests.exposition.factory.fleet`` (every field populated, half of
the processes in pods; Kubernetes labels on unless ``--no-kubernetes-labels``). Prints
p50/p99 in milliseconds for each stage and for the renderer's per-scrape paths: cached
(same snapshot, new data age), cold (a new snapshot every scrape, as with scrape-driven
collection; the equal copies let every line be reused) and gzip; and cold with real value
changes: one simulated collection (``synthetic_fleet``) 15 s apart per scrape.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import openmetrics
from prometheus_client.exposition import generate_latest

from bench.harness import timed_ms
from exporter.attribution.workloads import select
from exporter.catalogue.metrics import default_groups
from exporter.exposition import MetricsRenderer, build_registry, snapshot_families
from exporter.sources.simulated.scenario import synthetic_fleet
from exporter.sources.simulated.source import SimulatedSource
from exporter.state import ExporterState, ExpositionOptions
from tests.exposition import factory

OPENMETRICS = "application/openmetrics-text; version=1.0.0"
#: What Prometheus 3 sends by default (OpenMetrics first, UTF-8 names allowed).
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)


def simulated_states(count: int, gpus: int, processes: int) -> list[ExporterState]:
    """States from the simulated source, 15 s of simulated time apart (values move)."""
    now = [1.8e9]
    source = SimulatedSource(synthetic_fleet(gpus, processes), clock=lambda: now[0])
    source.start()
    states = []
    for _ in range(count):
        now[0] += 15.0
        snap = source.collect(default_groups())
        states.append(ExporterState(snap, 0.1, False, snap.taken_at))
    return states


def timed(fn: Callable[[], object], rounds: int) -> tuple[float, float]:
    """p50 and p99 of ``fn`` in milliseconds over ``rounds`` calls (after a short warm-up)."""
    samples = sorted(timed_ms(fn, rounds, min(rounds, 20)))
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--processes", type=int, default=32)
    parser.add_argument(
        "--no-kubernetes-labels", action="store_true", help="default options (no pod labels)"
    )
    args = parser.parse_args()
    rounds = max(10, min(args.rounds, 10_000))

    snap = factory.fleet(args.gpus, args.processes)
    options = ExpositionOptions(
        workload_labels=select(*() if args.no_kubernetes_labels else ("kubernetes",)))
    state = factory.state(snap)
    registry = build_registry(lambda: state, options, process_metrics=False)
    text = generate_latest(registry)
    renderer = MetricsRenderer()
    ages = iter(range(10**9))

    def fresh_state() -> ExporterState:
        return replace(state, data_age_seconds=float(next(ages)))

    def cold_state() -> ExporterState:
        # A new (equal) snapshot object defeats the cache, as a new collection would.
        return replace(state, snapshot=replace(snap), data_age_seconds=float(next(ages)))

    cases: list[tuple[str, Callable[[], object]]] = [
        ("families build", lambda: snapshot_families(snap, options)),
        ("text render (prometheus_client, uncached)", lambda: generate_latest(registry)),
        ("OpenMetrics render (uncached)", lambda: openmetrics.exposition.generate_latest(registry)),
        ("gzip of the text body (level 3)", lambda: gzip.compress(text, 3)),
        ("renderer text, cached snapshot", lambda: renderer.render(fresh_state(), options)),
        (
            "renderer OpenMetrics, cached",
            lambda: renderer.render(fresh_state(), options, OPENMETRICS),
        ),
        (
            "renderer text+gzip, cached",
            lambda: renderer.render(fresh_state(), options, None, "gzip"),
        ),
        ("renderer text, new snapshot", lambda: renderer.render(cold_state(), options)),
        (
            "renderer text+gzip, new snapshot",
            lambda: renderer.render(cold_state(), options, None, "gzip"),
        ),
        (
            "renderer OpenMetrics+gzip, new snapshot",
            lambda: renderer.render(cold_state(), options, PROMETHEUS_ACCEPT, "gzip"),
        ),
    ]
    moving = iter(simulated_states(rounds + 20, args.gpus, args.processes))
    cases.append((
        "renderer OM+gzip, simulated, 15 s apart",
        lambda: renderer.render(next(moving), options, PROMETHEUS_ACCEPT, "gzip"),
    ))
    lines = text.count(b"\n")
    print(
        f"{args.gpus} GPUs x {args.processes} processes, {rounds} rounds, "
        f"kubernetes labels {not args.no_kubernetes_labels}; text body {len(text)} bytes, "
        f"{lines} lines"
    )
    for name, fn in cases:
        p50, p99 = timed(fn, rounds)
        print(f"{name:45s} p50 {p50:7.3f} ms   p99 {p99:7.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
