"""Fixtures: the fake ``torch`` installed in ``sys.modules`` and a shared directory."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.fixtures import fake_torch

FAKE_TORCH_FILE = Path(fake_torch.__file__)


@pytest.fixture
def torch(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The fake torch, fresh (CUDA not initialised), as ``sys.modules['torch']``."""
    fake_torch.reset()
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    return fake_torch


@pytest.fixture
def fake_torch_path(tmp_path: Path) -> Path:
    """A directory holding the fake as ``torch.py``, for subprocesses' PYTHONPATH."""
    directory = tmp_path / "fake-torch"
    directory.mkdir()
    shutil.copy(FAKE_TORCH_FILE, directory / "torch.py")
    return directory


@pytest.fixture
def shared_dir(tmp_path: Path) -> Path:
    """The directory publishers and the exporter share."""
    directory = tmp_path / "torch-stats"
    directory.mkdir()
    return directory
