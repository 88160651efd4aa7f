"""Series per node for every scenario preset: as a plain exporter serves them (default groups)
and with every group on (the golden files), to see what a change adds.

Run from the repository root: ``.venv/bin/python bench/series_per_node.py [--compare REV]``.
With ``--compare``, the same counts of a git revision's checkout (a temporary worktree) are
printed beside these, with the growth in percent.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COUNT = """
import json, sys
sys.path.insert(0, {root!r})
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from dashboards.golden import golden_body
from exporter.attribution.accounting import IdleAccounting
from exporter.attribution.torchtotals import TorchUserTotals
from exporter.attribution.workloads import WorkloadLabels
from exporter.catalogue.metrics import Group, default_groups
from exporter.catalogue.workloads import KUBERNETES
from exporter.exposition.collector import snapshot_families
from exporter.exposition.encode import Encoder
from exporter.sources.simulated.scenario import list_presets, load_scenario
from exporter.sources.simulated.source import SimulatedSource
from exporter.state import ExpositionOptions

def series(text):
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))

def plain(preset):
    # As the goldens collect (one collection a minute for ten minutes), the default groups.
    clock = [1_700_000_000.0]
    source = SimulatedSource(load_scenario(preset), clock=lambda: clock[0])
    groups = default_groups() - {{Group.EXPORTER}}
    kinds = (KUBERNETES,) if preset in ("kubernetes-node", "dra-node") else ()
    workloads = WorkloadLabels(kinds)
    totals, accounting = TorchUserTotals(), IdleAccounting(workloads)
    snapshot = accounting.enrich(totals.enrich(source.collect(groups)))
    for _ in range(10):
        clock[0] += 60.0
        snapshot = accounting.enrich(totals.enrich(source.collect(groups)))
    options = ExpositionOptions(groups=groups | {{Group.EXPORTER}}, workload_labels=workloads)
    return Encoder(CONTENT_TYPE_PLAIN_0_0_4).encode(snapshot_families(snapshot, options))

print(json.dumps({{preset: [series(plain(preset)), series(golden_body(preset))]
                  for preset in list_presets()}}))
"""


def counts(root: Path) -> dict[str, list[int | None]]:
    """preset -> [series with the default groups, series with every group] of a checkout."""
    out = subprocess.run([sys.executable, "-c", COUNT.format(root=str(root))], cwd=root,
                         check=True, capture_output=True, text=True, timeout=600).stdout
    found: dict[str, list[int | None]] = json.loads(out)
    return found


def _growth(before: int | None, after: int | None) -> str:
    if before is None or after is None:
        return f"{'?' if before is None else before:>5} -> {after!s:>5}"
    return f"{before:>5} -> {after:>5} ({(after - before) * 100 / before:+.1f} %)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", metavar="REV", help="a git revision to compare with")
    args = parser.parse_args()
    now = counts(ROOT)
    if not args.compare:
        print(f"{'preset':<24} {'default groups':>15} {'every group':>12}")
        for preset, (plain, every) in now.items():
            print(f"{preset:<24} {plain!s:>15} {every!s:>12}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        worktree = Path(tmp) / "rev"
        subprocess.run(["git", "worktree", "add", "--detach", str(worktree), args.compare],
                       cwd=ROOT, check=True, capture_output=True, timeout=120)
        try:
            before = counts(worktree)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT,
                           check=False, capture_output=True, timeout=120)
    print(f"{'preset':<24} {'default groups':>28} {'every group (goldens)':>28}")
    for preset, (plain, every) in now.items():
        old = before.get(preset, [None, None])
        print(f"{preset:<24} {_growth(old[0], plain):>28} {_growth(old[1], every):>28}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
