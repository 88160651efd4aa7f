"""The exporter's own cost of collecting one idle GPU, with NVML's cost taken out.

Usage (repository root):

    .venv/bin/python bench/bench_collect_overhead.py [--baseline TREE] [--instructions]

``NvmlSource.collect`` reads one fake H200 (``tests.sources.fake_nvml``) whose answers are
memoised per (function, arguments), so a call costs a dict lookup and what remains is the
exporter's Python. Printed per tree: CPU time per collection (thread CPU time over blocks of
collections, the lowest block: other jobs on the machine inflate the rest), and with
``--instructions`` the instructions per collection counted by valgrind (deterministic: the
figure to compare on a noisy machine). ``--baseline TREE`` times an older tree the same way
(e.g. ``git archive e5e9773 | tar -x -C /tmp/base``), each tree in its own child process, with
the groups the baseline reads (the default groups minus ``mig``, ``remapping``, ``xid``).
On the GPU, ``scripts/gpu/compare_trees.py`` measures the same against the real driver.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import instructions_per_step  # noqa: E402

CHILD = r"""
import json, sys, time, types
root, tree, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, root)
from tests.sources.fake_nvml import FakeNvml, h200

def memoised(slow):
    # Every per-GPU getter answers from a cache (errors too): a call costs a dict lookup.
    fast = types.ModuleType("pynvml")
    for name in set(dir(slow)) | set(dir(type(slow))):
        if not name.startswith("_") or name == "_nvmlGetFunctionPointer":
            try:
                setattr(fast, name, getattr(slow, name))
            except Exception:
                pass
    slow.nvmlInit()
    handle = slow.nvmlDeviceGetHandleByIndex(0)
    for name in dir(type(slow)):
        if name.startswith("nvmlDeviceGet") and name != "nvmlDeviceGetHandleByIndex":
            def call(h, *args, _function=getattr(slow, name), _cache={}, **kwargs):
                key = (args, tuple(kwargs.items()))
                if key not in _cache:
                    try:
                        _cache[key] = _function(h, *args, **kwargs)
                    except Exception as exc:
                        _cache[key] = exc
                found = _cache[key]
                if isinstance(found, Exception):
                    raise found
                return found
            setattr(fast, name, call)
    fast.nvmlInit = fast.nvmlShutdown = lambda: None
    fast.nvmlDeviceGetHandleByIndex = lambda index: handle
    fast.nvmlDeviceGetCount = lambda: 1
    return fast

nvml = memoised(FakeNvml([h200(0)]))
sys.modules["pynvml"] = nvml
sys.path.insert(0, tree)
for name in [m for m in sys.modules if m == "exporter" or m.startswith("exporter.")]:
    del sys.modules[name]
try:
    from exporter.metrics import default_groups
    from exporter.sources.nvml.source import NvmlSource
    what = frozenset(g for g in default_groups() if g.value not in ("mig", "remapping", "xid"))
except ImportError:  # trees before the redesign (e5e9773): CollectOptions
    from exporter.sources.base import CollectOptions
    from exporter.sources.nvml import NvmlSource
    what = CollectOptions()
source = NvmlSource(hostname="bench", nvml=nvml)
source.start()
for _ in range(200):
    source.collect(what)
blocks = []
for _ in range(20):
    start = time.thread_time()
    for _ in range(count // 20):
        source.collect(what)
    blocks.append((time.thread_time() - start) / (count // 20))
print(json.dumps({"cpu_us": min(blocks) * 1e6}))
"""


def child(tree: Path, count: int) -> str:
    command = [sys.executable, "-c", CHILD, str(ROOT), str(tree), str(count)]
    out = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if out.returncode != 0:
        raise SystemExit(f"timing {tree} failed:\n{out.stderr[-3000:]}")
    return out.stdout


def cpu_us(tree: Path, rounds: int) -> float:
    return min(float(json.loads(child(tree, 2000).strip().splitlines()[-1])["cpu_us"])
               for _ in range(rounds))


def instructions(tree: Path) -> float:
    """Instructions per collection: two runs differing by 1,000 collections (start-up cancels)."""
    return instructions_per_step([sys.executable, "-c", CHILD, str(ROOT), str(tree)], 20, 1020)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="an older tree to time the same way")
    parser.add_argument("--rounds", type=int, default=3, help="child processes per tree")
    parser.add_argument("--instructions", action="store_true",
                        help="also count instructions per collection with valgrind")
    args = parser.parse_args()
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind")
    trees = {"this tree": ROOT}
    if args.baseline is not None:
        trees = {"baseline": args.baseline.resolve(), **trees}
    print("one idle H200-like GPU, NVML answers memoised: the exporter's own cost per collection")
    print(f"{'tree':12s} {'CPU us':>8s} {'k instructions':>15s}")
    figures: dict[str, tuple[float, float | None]] = {}
    for name, tree in trees.items():
        figures[name] = (cpu_us(tree, args.rounds),
                         instructions(tree) / 1000 if args.instructions else None)
        cpu, instr = figures[name]
        print(f"{name:12s} {cpu:8.1f} {'-' if instr is None else f'{instr:.1f}':>15s}")
    if args.baseline is not None:
        base, this = figures["baseline"], figures["this tree"]
        ratio = f"CPU {this[0] / base[0]:.2f}x"
        if base[1] and this[1]:
            ratio += f", instructions {this[1] / base[1]:.2f}x"
        print(f"this tree / baseline: {ratio}")


if __name__ == "__main__":
    main()
