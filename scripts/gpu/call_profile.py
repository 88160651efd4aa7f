"""Where an idle collection's time goes: each NVML call's count and time, two trees (issue 14).

Usage (on the GPU machine, from the repository root):
    git archive e5e9773 | tar -x -C /tmp/baseline      # the older tree, exported beforehand
    python3 scripts/gpu/call_profile.py --baseline /tmp/baseline [--rounds 3] [--collections 1000]

``compare_trees.py`` times whole collections; this says what differs inside them. Each tree's
``NvmlSource.collect`` runs in a child process whose ``pynvml`` functions are wrapped in timers
(outermost call only, so a binding function calling another is counted once). Per collection it
prints, for every NVML function either tree calls: calls and microseconds, per tree; then the
time in NVML calls and the rest (the exporter's own Python). This tree runs with the groups the
baseline's defaults read and no XID event waiter (as ``compare_trees.py``'s like-for-like
figure). Only the collecting thread's calls are timed. Figures per collection are means (so
they add up), medians over rounds; rounds alternate the trees. The timers add ~0.5 us a call
to both trees alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: Default groups added after the baseline (e5e9773): GPU health (issue 11).
ADDED_GROUPS = ("mig", "remapping", "xid")

CHILD = r"""
import collections, json, statistics, sys, threading, time
sys.path.insert(0, sys.argv[1])
count, added = int(sys.argv[2]), sys.argv[3].split(",")
import pynvml
seconds, calls = collections.Counter(), collections.Counter()
state = {"on": False, "depth": 0}
main = threading.get_ident()
def timed(name, function):
    def call(*args, **kwargs):
        if not state["on"] or state["depth"] or threading.get_ident() != main:
            return function(*args, **kwargs)
        state["depth"] += 1
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            seconds[name] += time.perf_counter() - start
            calls[name] += 1
            state["depth"] -= 1
    return call
for name in dir(pynvml):
    value = getattr(pynvml, name)
    if name.startswith("nvml") and callable(value) and not isinstance(value, type):
        setattr(pynvml, name, timed(name, value))
try:
    from exporter.metrics import default_groups
    from exporter.sources.nvml.source import NvmlSource
    arg = frozenset(g for g in default_groups() if g.value not in added)
    options = {"watch_events": False}  # as the CLI runs without the xid group
except ImportError:  # trees before the redesign: CollectOptions
    from exporter.sources.base import CollectOptions
    from exporter.sources.nvml import NvmlSource
    arg = CollectOptions()
    options = {}
source = NvmlSource(hostname="profile", **options)
source.start()
for _ in range(50):
    source.collect(arg)
state["on"] = True
times = []
for _ in range(count):
    start = time.perf_counter()
    source.collect(arg)
    times.append(time.perf_counter() - start)
state["on"] = False
print(json.dumps({"total_us": statistics.fmean(times) * 1e6,
                  "p50_us": statistics.median(times) * 1e6,
                  "calls": {k: v / count for k, v in calls.items()},
                  "us": {k: v / count * 1e6 for k, v in seconds.items()}}))
"""


def profile(tree: Path, collections: int) -> dict[str, Any]:
    """One child's figures per collection."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(tree), str(collections),
                          ",".join(ADDED_GROUPS)],
                         capture_output=True, text=True, check=True, timeout=300)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def median_profile(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds of the total and of each function's calls and time."""
    names = sorted({name for run in runs for name in run["us"]})
    return {
        "total_us": statistics.median(run["total_us"] for run in runs),
        "p50_us": statistics.median(run["p50_us"] for run in runs),
        "calls": {n: statistics.median(run["calls"].get(n, 0.0) for run in runs) for n in names},
        "us": {n: statistics.median(run["us"].get(n, 0.0) for run in runs) for n in names},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the older tree")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--collections", type=int, default=1000)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "this": []}
    for _ in range(args.rounds):
        runs["baseline"].append(profile(args.baseline, args.collections))
        runs["this"].append(profile(ROOT, args.collections))
    base, this = median_profile(runs["baseline"]), median_profile(runs["this"])
    names = sorted(set(base["us"]) | set(this["us"]),
                   key=lambda n: -max(base["us"].get(n, 0.0), this["us"].get(n, 0.0)))
    print(f"per idle collection, medians of {args.rounds} rounds x {args.collections} "
          f"collections; this tree without {','.join(ADDED_GROUPS)}")
    print(f"{'NVML function':<48} {'calls b':>8} {'calls t':>8} {'us b':>8} {'us t':>8}")
    for name in names:
        print(f"{name:<48} {base['calls'].get(name, 0):>8.2f} {this['calls'].get(name, 0):>8.2f} "
              f"{base['us'].get(name, 0):>8.1f} {this['us'].get(name, 0):>8.1f}")
    in_nvml = {key: sum(figures["us"].values()) for key, figures in
               (("b", base), ("t", this))}
    for label, key, figures in (("baseline", "b", base), ("this tree", "t", this)):
        print(f"{label:<10} total {figures['total_us']:8.1f} us: in NVML calls "
              f"{in_nvml[key]:8.1f} us, the rest {figures['total_us'] - in_nvml[key]:8.1f} us "
              f"(mean; p50 of a collection {figures['p50_us']:.1f} us)")
    print(f"ratio this/baseline: total x{this['total_us'] / base['total_us']:.2f}, "
          f"NVML calls x{in_nvml['t'] / in_nvml['b']:.2f}, rest "
          f"x{(this['total_us'] - in_nvml['t']) / (base['total_us'] - in_nvml['b']):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
