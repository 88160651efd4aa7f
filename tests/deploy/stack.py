"""Shared readers for the compose stack's files (docker/compose.yaml and what it mounts)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
COMPOSE_FILE = DOCKER / "compose.yaml"
RULES_DIR = REPO / "dashboards" / "rules"
DASHBOARDS_DIR = REPO / "dashboards" / "grafana"

_DEFAULT = re.compile(r"\$\{([A-Z0-9_]+)(?::?-([^}]*))?\}")


def with_defaults(text: str) -> str:
    """Compose interpolation as on a machine that sets none of the variables."""
    return _DEFAULT.sub(lambda m: m.group(2) or "", text)


@cache
def compose() -> dict[str, Any]:
    """docker/compose.yaml, parsed (YAML merge keys resolved)."""
    data = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def service(name: str) -> dict[str, Any]:
    result: dict[str, Any] = compose()["services"][name]
    return result


def bind_mounts(name: str) -> list[dict[str, Any]]:
    """The service's bind mounts in long form (short ``src:dst[:ro]`` strings converted)."""
    mounts = []
    for volume in service(name).get("volumes", []):
        if isinstance(volume, str):
            parts = volume.split(":")
            if not parts[0].startswith((".", "/")):
                continue  # a named volume
            mounts.append({"type": "bind", "source": parts[0], "target": parts[1],
                           "read_only": len(parts) > 2 and "ro" in parts[2].split(",")})
        elif volume.get("type") == "bind":
            mounts.append(volume)
    return mounts


def host_path(source: str) -> Path:
    """A relative bind source as a path in the repository (compose resolves from docker/)."""
    return (DOCKER / source).resolve()


def mount_source(name: str, target: str) -> Path:
    """The repository path bind-mounted at ``target`` in service ``name``."""
    for mount in bind_mounts(name):
        if mount["target"] == target:
            return host_path(mount["source"])
    raise AssertionError(f"{name} mounts nothing at {target}")


def rule_files() -> list[Path]:
    """The repository's Prometheus rule files (top level of dashboards/rules/)."""
    return sorted(RULES_DIR.glob("*.yaml"))


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARDS_DIR.glob("*.json"))
