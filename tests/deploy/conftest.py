"""Fixtures shared by the deployment tests."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.processes import stop_all


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Subprocesses the test appends here are stopped when it ends."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    stop_all(procs, timeout=10)


@pytest.fixture
def prometheus_bin() -> str:
    """The ``prometheus`` binary (Debian's package; scripts/test installs it)."""
    path = shutil.which("prometheus")
    assert path, "prometheus not found: install Debian's prometheus (scripts/test does)"
    return path
