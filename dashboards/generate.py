"""Write (or check) the generated dashboard JSON and rule YAML files.

Usage::

    python -m dashboards.generate            # rewrite dashboards/grafana/*.json, rules/*.yaml
    python -m dashboards.generate --check    # exit 1 if a committed file differs

``--dir`` points at another ``dashboards/`` folder (tests use a temporary copy).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from dashboards import alerts, fleet, health, node, recording, rules, users

HERE = Path(__file__).resolve().parent

#: Dashboard file name -> builder. Paths are stable: the compose stack and Helm chart use them.
DASHBOARDS: dict[str, Callable[[], dashboard.Dashboard]] = {
    "gpu-fleet-overview.json": fleet.build,
    "gpu-node-device.json": node.build,
    "gpu-users-processes.json": users.build,
    "gpu-exporter-health.json": health.build,
}
ALERTS_FILE = "gpu-exporter-alerts.yaml"
RECORDING_FILE = "gpu-exporter-recording.yaml"


def dashboard_json(build: Callable[[], dashboard.Dashboard]) -> str:
    """One dashboard as classic JSON text (sorted keys, two-space indent, final newline)."""
    with warnings.catch_warnings():
        # The classic builders warn that v2 exists; provisioning and the sidecar need classic.
        warnings.simplefilter("ignore", DeprecationWarning)
        model = build().build()
    return JSONEncoder(sort_keys=True, indent=2).encode(model) + "\n"


def outputs() -> dict[str, str]:
    """Every generated file, as path relative to ``dashboards/`` -> content."""
    files = {f"grafana/{name}": dashboard_json(build) for name, build in DASHBOARDS.items()}
    files[f"rules/{ALERTS_FILE}"] = rules.render(alerts.groups(), "alerts.py")
    files[f"rules/{RECORDING_FILE}"] = rules.render(recording.groups(), "recording.py")
    return files


def stale_files(root: Path) -> list[str]:
    """Generated files that are missing under ``root`` or differ from what is generated."""
    stale = []
    for rel, text in outputs().items():
        path = root / rel
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(rel)
    return stale


def write(root: Path) -> list[str]:
    """Write every generated file under ``root``; returns the ones that changed.

    Raises:
        OSError: a file cannot be written.
    """
    changed = stale_files(root)
    for rel, text in outputs().items():
        if rel in changed:
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (1 when ``--check`` finds drift)."""
    parser = argparse.ArgumentParser(prog="python -m dashboards.generate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if a committed file is out of date")
    parser.add_argument("--dir", type=Path, default=HERE,
                        help="the dashboards/ folder to write or check (default: this package)")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.dir)
        for rel in stale:
            print(f"out of date: {args.dir / rel} (run python -m dashboards.generate)",
                  file=sys.stderr)
        return 1 if stale else 0
    for rel in write(args.dir):
        print(f"wrote {args.dir / rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
