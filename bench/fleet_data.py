"""History for a simulated GPU fleet, as OpenMetrics for ``promtool tsdb create-blocks-from``.

Each node is what ``gpu-exporter --source simulated --scenario synthetic:GxP --hostname
nodeNNN --simulate.seed NNN`` would serve, rendered by the exporter's own code at every scrape
time of the range (simulated time follows the timestamps, so values move and processes churn
exactly as on a live exporter). Prometheus' target labels ``job`` and ``instance`` (``nodeNNN``)
and the ``up`` series are added the way a scrape adds them.

Usage (from the repository root)::

    .venv/bin/python bench/fleet_data.py --nodes 100 --minutes 60 --interval 15 --out fleet.om

``bench/fleet.py --backfill N`` calls it, then ``promtool tsdb create-blocks-from openmetrics``.
The last sample of every node is also returned as a plain exposition (``last_bodies``) so that
a stand-in target can keep serving it: a backfilled TSDB plus fresh scrapes.
"""

from __future__ import annotations

import argparse
import multiprocessing
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from exporter.cli import build_accounting, parse_config
from exporter.exposition import MetricsRenderer
from exporter.sources.simulated.scenario import synthetic_fleet
from exporter.sources.simulated.source import SimulatedSource
from exporter.state import ExporterState

JOB = "gpu-exporter"


@dataclass(frozen=True)
class FleetSpec:
    """What to generate: ``nodes`` hosts of ``gpus`` x ``processes`` each, scraped every
    ``interval`` seconds from ``end - minutes * 60`` to ``end`` (Unix seconds)."""

    nodes: int
    end: float
    minutes: float = 60.0
    interval: float = 15.0
    gpus: int = 8
    processes: int = 32

    @property
    def scenario(self) -> str:
        """The ``--scenario`` value of the equivalent live exporter."""
        return f"synthetic:{self.gpus}x{self.processes}"

    def times(self) -> list[float]:
        """Every scrape time, oldest first (whole milliseconds, as Prometheus stores them)."""
        count = int(self.minutes * 60 // self.interval) + 1
        return [round(self.end - (count - 1 - k) * self.interval, 3) for k in range(count)]


def hostname(node: int) -> str:
    """The host name (and ``instance`` label) of node ``node``."""
    return f"node{node:03d}"


def exporter_args(spec: FleetSpec, node: int) -> list[str]:
    """The flags of the live exporter this node stands for."""
    return ["--source", "simulated", "--scenario", spec.scenario, "--hostname", hostname(node),
            "--simulate.seed", str(node)]


def node_bodies(spec: FleetSpec, node: int) -> Iterator[tuple[float, str]]:
    """(scrape time, text 0.0.4 body) of one node at every scrape time of the range."""
    config = parse_config(exporter_args(spec, node), {})
    now = [spec.times()[0]]
    source = SimulatedSource(
        synthetic_fleet(spec.gpus, spec.processes, seed=config.simulate_seed),
        seed=config.simulate_seed, clock=lambda: now[0], hostname=config.hostname,
    )
    # The simulation starts (t = 0) at the first scrape; processes already have ages then.
    renderer = MetricsRenderer(process_metrics=False)
    groups, exposition_options = config.collect_groups(), config.exposition_options()
    accounting = build_accounting(config)
    for at in spec.times():
        now[0] = at
        snapshot = source.collect(groups)
        if accounting is not None:
            snapshot = accounting.enrich(snapshot)
        state = ExporterState(snapshot, 0.05, False, snapshot.taken_at)
        body, _ = renderer.render(state, exposition_options)
        yield at, body.decode("utf-8")


def with_target(body: str, node: int, at: float) -> list[str]:
    """OpenMetrics sample lines of one body: target labels added, timestamp appended, the
    comment lines dropped (the TSDB keeps no metadata), ``up`` added as a scrape would."""
    target = f'instance="{hostname(node)}",job="{JOB}"'
    stamp = f" {at:.3f}\n"
    lines = [f"up{{{target}}} 1{stamp}"]
    for line in body.splitlines():
        if not line or line[0] == "#":
            continue
        name, brace, rest = line.partition("{")
        if brace:
            lines.append(f"{name}{{{target},{rest}{stamp}")
        else:
            metric, _, value = line.partition(" ")
            lines.append(f"{metric}{{{target}}} {value}{stamp}")
    return lines


def write_nodes(spec: FleetSpec, nodes: Sequence[int], out: Path) -> tuple[int, dict[int, str]]:
    """Append the samples of ``nodes`` to ``out`` (no ``# EOF``); returns (samples written,
    node -> its last body)."""
    samples = 0
    last: dict[int, str] = {}
    with out.open("w", encoding="utf-8") as file:
        for node in nodes:
            for at, body in node_bodies(spec, node):
                lines = with_target(body, node, at)
                samples += len(lines)
                file.writelines(lines)
                last[node] = body
    return samples, last


def _write_part(args: tuple[FleetSpec, list[int], Path]) -> tuple[int, dict[int, str]]:
    # A pool worker ends on SIGTERM quietly (the parent may turn SIGTERM into an exception).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return write_nodes(*args)


def generate(spec: FleetSpec, out: Path, workers: int = 2) -> tuple[int, dict[int, str]]:
    """Write the whole fleet's history to ``out`` (OpenMetrics, ending with ``# EOF``), using
    ``workers`` processes; returns (samples, node -> last body).

    Raises:
        OSError: a file cannot be written.
    """
    workers = max(1, min(workers, spec.nodes))
    parts = [out.with_name(f"{out.name}.part{k}") for k in range(workers)]
    chunks = [list(range(k, spec.nodes, workers)) for k in range(workers)]
    jobs = [(spec, chunk, part) for chunk, part in zip(chunks, parts, strict=True)]
    if workers == 1:
        results = [_write_part(jobs[0])]
    else:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            results = pool.map(_write_part, jobs)
    samples, last = 0, {}
    with out.open("wb") as file:
        for part, (count, bodies) in zip(parts, results, strict=True):
            with part.open("rb") as piece:
                while block := piece.read(1 << 24):
                    file.write(block)
            part.unlink()
            samples += count
            last.update(bodies)
        file.write(b"# EOF\n")
    return samples, last


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=15.0, help="seconds between scrapes")
    parser.add_argument("--end", type=float, default=None, help="Unix time of the last scrape "
                        "(default: now)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    spec = FleetSpec(args.nodes, args.end if args.end is not None else time.time(),
                     args.minutes, args.interval)
    started = time.monotonic()
    samples, _ = generate(spec, args.out, args.workers)
    print(f"{samples} samples for {spec.nodes} nodes x {len(spec.times())} scrapes in "
          f"{time.monotonic() - started:.1f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
