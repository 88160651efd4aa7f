"""Two exporter trees' collections of one GPU, timed in one process in alternating blocks.

Usage (repository root; BASELINE e.g. ``git archive e5e9773 | tar -x -C /tmp/base``):

    python3 bench/paired_collect.py BASELINE [--blocks 40] [--collections 200] [--memoised-fake]

Timed in separate processes, two trees' idle collections differ less than the processes do: on
the H200 host one child's p50 moved 43-92 us between rounds, and the ratio of the trees swung
from x0.79 to x1.58 between batches of the same code. Here both trees' ``exporter`` packages
are imported into one process, one after the other under the one name (what each made keeps
its own modules), and their sources collect in alternating blocks (ABBA order), so they see
the same host speed, NVML state and interpreter. The ratio is the median over blocks of
p50(this tree) / p50(baseline) of the two blocks run side by side. This tree reads the groups
the baseline reads (its default groups minus ``ADDED_GROUPS``), without the XID event waiter,
as the CLI runs those groups.

``--memoised-fake`` answers from the fake H200 of ``tests.sources.fake_nvml`` with every
answer memoised (a call costs a dict lookup): what is left is the exporters' own Python, on a
machine without a GPU. Without it, the real NVML (``scripts/gpu/compare_trees.py`` runs it so
on the GPU). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: Default groups added after the baseline (e5e9773): GPU health (issue 11).
ADDED_GROUPS = ("mig", "remapping", "xid")


def install_memoised_fake() -> None:
    """Make ``import pynvml`` give the fake H200 whose per-GPU answers (errors too) are
    memoised per arguments, so NVML costs a dict lookup."""
    sys.path.insert(0, str(ROOT))
    fake = importlib.import_module("tests.sources.fake_nvml")
    slow = fake.FakeNvml([fake.h200(0)])
    fast = types.ModuleType("pynvml")
    for name in set(dir(slow)) | set(dir(type(slow))):
        if not name.startswith("_") or name == "_nvmlGetFunctionPointer":
            with contextlib.suppress(AttributeError):
                setattr(fast, name, getattr(slow, name))
    slow.nvmlInit()
    handle = slow.nvmlDeviceGetHandleByIndex(0)

    def memoised(function: Any) -> Any:
        answers: dict[tuple[Any, ...], Any] = {}

        def call(gpu: Any, *args: Any, **kwargs: Any) -> Any:
            key = (args, tuple(kwargs.items()))
            if key not in answers:
                try:
                    answers[key] = function(gpu, *args, **kwargs)
                except Exception as exc:  # answered again, as NVML would
                    answers[key] = exc
            found = answers[key]
            if isinstance(found, Exception):
                raise found
            return found
        return call

    for name in dir(type(slow)):
        if name.startswith("nvmlDeviceGet") and name != "nvmlDeviceGetHandleByIndex":
            setattr(fast, name, memoised(getattr(slow, name)))
    fast.nvmlInit = fast.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    fast.nvmlDeviceGetHandleByIndex = lambda index: handle  # type: ignore[attr-defined]
    fast.nvmlDeviceGetCount = lambda: 1  # type: ignore[attr-defined]
    sys.modules["pynvml"] = fast


def load_tree(tree: Path, *, hostname: str = "bench", baseline_groups: bool = True,
              watch_events: bool = False) -> tuple[Any, Any]:
    """A started ``NvmlSource`` of ``tree``'s ``exporter`` and what its ``collect`` takes,
    imported afresh (any ``exporter`` imported before is replaced): the baseline's groups (its
    default groups minus ``ADDED_GROUPS``) or with ``baseline_groups=False`` the tree's own
    defaults, and the XID event waiter only with ``watch_events``. A tree from before the
    redesign (e5e9773) reads its ``CollectOptions`` defaults, as it always did."""
    for name in [m for m in sys.modules if m == "exporter" or m.startswith("exporter.")]:
        del sys.modules[name]
    sys.path.insert(0, str(tree))
    try:
        # Imported by name: which ``exporter`` this is depends on the path just set.
        try:
            groups = importlib.import_module("exporter.metrics").default_groups()
            nvml = importlib.import_module("exporter.sources.nvml.source")
            what: Any = frozenset(g for g in groups
                                  if not baseline_groups or g.value not in ADDED_GROUPS)
            source: Any = nvml.NvmlSource(hostname=hostname, watch_events=watch_events)
        except ImportError:  # trees before the redesign (e5e9773): CollectOptions
            options = importlib.import_module("exporter.sources.base").CollectOptions
            nvml = importlib.import_module("exporter.sources.nvml")
            what, source = options(), nvml.NvmlSource(hostname=hostname)
        source.start()
    finally:
        sys.path.remove(str(tree))
    return source, what


def paired(baseline: Path, this: Path, blocks: int, collections: int) -> dict[str, Any]:
    """Median p50s and the median of per-block ratios (see the module docstring)."""
    sources = {"baseline": load_tree(baseline), "this": load_tree(this)}
    for source, what in sources.values():
        for _ in range(200):
            source.collect(what)
    p50s: dict[str, list[float]] = {name: [] for name in sources}
    cpu = dict.fromkeys(sources, 0.0)
    for block in range(blocks):
        for name in ("baseline", "this") if block % 2 == 0 else ("this", "baseline"):
            source, what = sources[name]
            times = []
            started = time.thread_time()
            for _ in range(collections):
                start = time.perf_counter()
                source.collect(what)
                times.append(time.perf_counter() - start)
            cpu[name] += time.thread_time() - started
            p50s[name].append(statistics.median(times))
    for source, _ in sources.values():
        close = getattr(source, "close", None)
        if close is not None:
            close()
    ratios = [t / b for t, b in zip(p50s["this"], p50s["baseline"], strict=True)]
    return {"p50_us": {name: statistics.median(found) * 1e6 for name, found in p50s.items()},
            "cpu_us": {name: cpu[name] / (blocks * collections) * 1e6 for name in sources},
            "ratio_p50": statistics.median(ratios),
            "ratio_quartiles": statistics.quantiles(ratios, n=4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", type=Path, help="the older tree")
    parser.add_argument("--this", type=Path, default=ROOT, help="the newer tree (this one)")
    parser.add_argument("--blocks", type=int, default=40, help="blocks per tree")
    parser.add_argument("--collections", type=int, default=200, help="collections per block")
    parser.add_argument("--memoised-fake", action="store_true",
                        help="the fake H200 with memoised answers instead of NVML")
    args = parser.parse_args()
    if args.blocks < 2 or args.collections < 1:
        parser.error("--blocks must be at least 2 and --collections at least 1")
    if args.memoised_fake:
        install_memoised_fake()
    print(json.dumps(paired(args.baseline.resolve(), args.this.resolve(), args.blocks,
                            args.collections)))


if __name__ == "__main__":
    main()
