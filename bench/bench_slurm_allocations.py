"""Slurm allocation files benchmark: what reading the prolog's directory costs a collection.

Run from the repository root: ``.venv/bin/python bench/bench_slurm_allocations.py``.

A temporary directory holds the files a Jobstats-style prolog leaves for a node of G GPUs
(an index file and a UUID file per GPU). Prints, per G, the time of one
``AllocationFiles.read()`` plus the join with the snapshot's GPUs (p50 of many rounds):
unchanged (the steady state: one directory stat and one lstat per file), after a file was
rewritten in place (one file read again), and after a job ended (the directory listed again).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exporter.attribution.slurm_allocations import (  # noqa: E402
    AllocationFiles,
    join_slurm_allocations,
)
from tests.exposition import factory  # noqa: E402


def _p50_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def bench(gpus: int, rounds: int) -> tuple[float, float, float]:
    """(unchanged, one file rewritten, directory changed) in microseconds per collection."""
    readings = [factory.reading(i) for i in range(gpus)]
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for reading in readings:
            for name in (str(reading.identity.index), reading.identity.uuid):
                (directory / name).write_text(f"{913000 + reading.identity.index} 2001\n")
        files = AllocationFiles(tmp)
        join_slurm_allocations(files.read(), readings)

        def once() -> float:
            started = time.perf_counter()
            join_slurm_allocations(files.read(), readings)
            return time.perf_counter() - started

        steady = [once() for _ in range(rounds)]
        rewritten = []
        for n in range(rounds):
            (directory / "0").write_text(f"{914000 + n} 2001\n")
            rewritten.append(once())
        relisted = []
        spare = directory / f"GPU-{uuid.UUID(int=1)}"  # a job starts, then ends, and so on
        for n in range(rounds):
            if n % 2 == 0:
                spare.write_text("1 0\n")
            else:
                spare.unlink()
            relisted.append(once())
    return _p50_us(steady), _p50_us(rewritten), _p50_us(relisted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    print(f"{'GPUs':>5} {'files':>6} {'unchanged us':>13} {'one rewritten us':>17} "
          f"{'dir changed us':>15}")
    for gpus in (1, 8, 16, 64):
        steady, rewritten, relisted = bench(gpus, args.rounds)
        print(f"{gpus:>5} {2 * gpus:>6} {steady:>13.1f} {rewritten:>17.1f} {relisted:>15.1f}")


if __name__ == "__main__":
    main()
