"""The exporter's own cost of collecting one idle GPU, with NVML's cost taken out.

Usage (repository root):

    .venv/bin/python bench/bench_collect_overhead.py [--baseline TREE] [--instructions]

``NvmlSource.collect`` reads one fake H200 (``tests.sources.fake_nvml``) whose answers are
memoised per (function, arguments), so a call costs a dict lookup and what remains is the
exporter's Python (``bench.paired_collect``). Printed per tree: the p50 of a collection, and
with ``--instructions`` the instructions per collection counted by valgrind, each tree in its
own process (deterministic: the figure to compare on a noisy machine). ``--baseline TREE``
compares an older tree (e.g. ``git archive e5e9773 | tar -x -C /tmp/base``) read with the
groups it reads (the default groups minus ``mig``, ``remapping``, ``xid``); the times then come
from both trees in one process, in alternating blocks: timed in separate processes, this VM's
speed moved more between the children than the trees differ.
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

PAIRED = ROOT / "bench" / "paired_collect.py"

#: One tree's collections, for valgrind: start-up, 200 warm-up collections, then argv[3].
CHILD = r"""
import sys
root, tree, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, root)
from bench.paired_collect import install_memoised_fake, load_tree
install_memoised_fake()
source, what = load_tree(tree)
for _ in range(200 + count):
    source.collect(what)
"""


def times(baseline: Path | None) -> dict[str, float]:
    """p50 microseconds per tree: this tree alone, or both in one process (paired)."""
    command = [sys.executable, str(PAIRED), str(baseline or ROOT), "--memoised-fake"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if out.returncode != 0:
        raise SystemExit(f"timing failed:\n{out.stderr[-3000:]}")
    found = json.loads(out.stdout.strip().splitlines()[-1])
    p50: dict[str, float] = found["p50_us"]
    if baseline is None:  # this tree against itself: its own figure
        return {"this tree": p50["this"]}
    return {"baseline": p50["baseline"], "this tree": p50["this"], "ratio": found["ratio_p50"]}


def instructions(tree: Path) -> float:
    """Instructions per collection: two runs differing by 1,000 collections (start-up cancels)."""
    return instructions_per_step([sys.executable, "-c", CHILD, str(ROOT), str(tree)], 20, 1020)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="an older tree to time the same way")
    parser.add_argument("--instructions", action="store_true",
                        help="also count instructions per collection with valgrind")
    args = parser.parse_args()
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind")
    baseline = None if args.baseline is None else args.baseline.resolve()
    trees = {"this tree": ROOT} if baseline is None else {"baseline": baseline, "this tree": ROOT}
    p50 = times(baseline)
    counted = {name: instructions(tree) / 1000 for name, tree in trees.items()} \
        if args.instructions else {}
    print("one idle H200-like GPU, NVML answers memoised: the exporter's own cost per collection")
    print(f"{'tree':12s} {'p50 us':>8s} {'k instructions':>15s}")
    for name in trees:
        count = counted.get(name)
        print(f"{name:12s} {p50[name]:8.1f} {'-' if count is None else f'{count:.1f}':>15s}")
    if baseline is not None:
        ratio = f"p50 {p50['ratio']:.2f}x (median of paired blocks)"
        if counted:
            ratio += f", instructions {counted['this tree'] / counted['baseline']:.2f}x"
        print(f"this tree / baseline: {ratio}")


if __name__ == "__main__":
    main()
