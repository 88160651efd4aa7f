"""Shared setup for the dashboard tests."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

SDK_WARNING = "Prefer using dashboardv2"

# grafana-foundation-sdk warns at import time that the v2 dashboard model exists; the classic
# model is the one file provisioning and the Grafana sidecar load, so the warning is expected.
# Import its modules once here, under a filter, before the test modules do.
# The SDK needs Python >= 3.11; on 3.10 only the dashboard-model tests are left out (the rule,
# promtool and live tests need no SDK, and the committed JSON needs none at runtime).
collect_ignore: list[str] = []
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=SDK_WARNING, category=DeprecationWarning)
    try:
        import grafana_foundation_sdk.models.dashboard  # noqa: F401

        import dashboards.generate  # noqa: F401  (imports the SDK builders and models)
    except ImportError:  # pragma: no cover - Python 3.10 without the SDK
        collect_ignore.append("test_dashboard_json.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Keep ignoring that warning while the dashboard tests run (pytest resets filters)."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.filterwarnings(f"ignore:{SDK_WARNING}:DeprecationWarning"))
