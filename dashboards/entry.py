"""``gpu-exporter-generate``: the generator from an install, with a one-line hint where the
``generate`` extra (the Grafana dashboard builder) is missing."""

from __future__ import annotations

import sys

__all__ = ["main"]

HINT = ("gpu-exporter-generate: error: the dashboards need the generate extra: "
        "pip install 'gpu-exporter[generate]' (Python 3.11 or newer)")


def main() -> int:
    """Run ``dashboards.generate`` (its arguments are this command's)."""
    try:
        from dashboards.generate import main as generate  # noqa: PLC0415 (the hint first)
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("grafana_foundation_sdk"):
            raise
        print(HINT, file=sys.stderr)
        return 2
    return generate()
