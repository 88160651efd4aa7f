"""Cost of the exporter's side of the allocator join (TorchStatsReader) per collection.

Usage: ``.venv/bin/python bench/bench_torch_reader.py [--files 8 64 256] [--rounds 300]``

A directory with N publisher files and a fake procfs with the N matching processes (the layout
the kernel gives: stat, status with NSpid, ns/pid link). Three cases per N, each the median
over ``--rounds`` collections of ``scan`` + one ``lookup`` per process:

- ``unchanged``: no file changed since the last collection (the common case between two
  publisher writes: only ``scandir`` + ``lstat`` per file, and one ``stat`` read per process);
- ``all rewritten``: every file replaced since the last collection (the worst case: every
  file is opened, read and parsed);
- ``no files``: an empty directory (what a host without publishers pays).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from exporter.attribution.torchstats import TorchStatsReader
from tests.fixtures.fakeproc import stat_line, write_boot

NS = 4026530001


def _document(pid: int, generation: int) -> str:
    devices = [{"index": 0, "uuid": "GPU-00000000-0000-0000-0000-000000000000",
                "allocated_bytes": 1 << 30 + generation % 2, "reserved_bytes": 2 << 30,
                "active_bytes": 1 << 30, "inactive_split_bytes": 1 << 20,
                "peak_allocated_bytes": 2 << 30, "alloc_retries": generation, "ooms": 0}]
    return json.dumps({"format": 1, "pid": pid, "start_ticks": 5000, "pid_namespace": NS,
                       "uid": os.getuid(), "time": time.time(), "interval_seconds": 5,
                       "torch_version": "2.11.0", "devices": devices})


def _write(directory: Path, pid: int, generation: int) -> None:
    name = f"{pid}-5000-{NS}.json"
    temporary = directory / f".{name}.tmp"
    temporary.write_text(_document(pid, generation))
    os.replace(temporary, directory / name)


def _setup(root: Path, count: int, with_files: bool) -> tuple[TorchStatsReader, list[int]]:
    directory, procfs = root / f"dir-{count}-{with_files}", root / f"proc-{count}-{with_files}"
    directory.mkdir()
    write_boot(procfs)
    (procfs / "1" / "ns").mkdir(parents=True)
    (procfs / "1" / "ns" / "pid").symlink_to(f"pid:[{NS}]")
    pids = list(range(10_000, 10_000 + count))
    for pid in pids:
        proc = procfs / str(pid)
        (proc / "ns").mkdir(parents=True)
        (proc / "stat").write_text(stat_line(pid, "python", 5000))
        (proc / "status").write_text(f"Name:\tpython\nUid:\t{os.getuid()}\t0\t0\t0\n"
                                     f"NSpid:\t{pid}\n")
        (proc / "ns" / "pid").symlink_to(f"pid:[{NS}]")
        if with_files:
            _write(directory, pid, 0)
    reader = TorchStatsReader(str(directory), procfs=str(procfs), max_age=3600,
                              cleanup_interval=1e9)
    return reader, pids


def _collect(reader: TorchStatsReader, pids: list[int]) -> int:
    found = 0
    with reader.collection():
        for pid in pids:
            found += reader.lookup(pid) is not None
    return found


def _median_us(reader: TorchStatsReader, pids: list[int], rounds: int,
               rewrite: Path | None) -> tuple[float, int]:
    samples, found = [], 0
    for generation in range(1, rounds + 1):
        if rewrite is not None:
            for pid in pids:
                _write(rewrite, pid, generation)
        start = time.perf_counter()
        found = _collect(reader, pids)
        samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples), found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--files", type=int, nargs="+", default=[8, 64, 256])
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="torch-reader-bench-") as tmp:
        root = Path(tmp)
        for count in args.files:
            reader, pids = _setup(root, count, with_files=True)
            _collect(reader, pids)  # first read of every file
            unchanged, found = _median_us(reader, pids, args.rounds, None)
            assert found == count, (found, count)
            rewritten, found = _median_us(reader, pids, max(20, args.rounds // 5),
                                          Path(reader.directory))
            assert found == count, (found, count)
            empty_reader, empty_pids = _setup(root, count, with_files=False)
            empty, _ = _median_us(empty_reader, empty_pids, args.rounds, None)
            print(f"{count:>4} processes with publisher files: unchanged {unchanged:8.1f} us "
                  f"({unchanged / count:.1f} us/process), all rewritten {rewritten:8.1f} us "
                  f"({rewritten / count:.1f} us/process); {count} processes, no files "
                  f"{empty:6.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
