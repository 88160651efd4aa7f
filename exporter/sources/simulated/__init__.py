"""Simulated source: scenario presets played as a changing fleet (no GPU needed).

``list_presets`` lives here, away from the scenario loader, so that flag parsing can name the
presets without importing YAML and the simulator (an NVML exporter never needs them).
"""

from __future__ import annotations

from importlib import resources

__all__ = ["list_presets"]


def list_presets() -> list[str]:
    """Names of the bundled presets, sorted."""
    folder = resources.files(__name__).joinpath("scenarios")
    return sorted(f.name[:-5] for f in folder.iterdir() if f.name.endswith(".yaml"))
