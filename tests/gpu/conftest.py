"""GPU-only tests: marked ``gpu`` and skipped cleanly where NVML or a GPU is missing.

The check runs once per session: import pynvml, nvmlInit, count GPUs, shut down again.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = Path(__file__).parent
_reason: list[str | None] = []


def nvml_missing_reason() -> str | None:
    """Why GPU tests cannot run here (None: NVML works and sees at least one GPU)."""
    if _reason:
        return _reason[0]
    reason: str | None = None
    try:
        import pynvml  # noqa: PLC0415 - only where GPU tests are collected

        pynvml.nvmlInit()
        try:
            if pynvml.nvmlDeviceGetCount() == 0:
                reason = "NVML sees no GPU"
        finally:
            pynvml.nvmlShutdown()
    except ImportError as exc:
        reason = f"pynvml (nvidia-ml-py) not importable: {exc}"
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        reason = f"NVML not usable here: {exc}"
    _reason.append(reason)
    return reason


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mine = [item for item in items if _HERE in Path(str(item.fspath)).parents]
    if not mine:
        return
    reason = nvml_missing_reason()
    for item in mine:
        item.add_marker(pytest.mark.gpu)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="module")
def pynvml() -> Iterator[types.ModuleType]:
    """The real binding, initialised for a test module."""
    import pynvml as real  # noqa: PLC0415 - importable once conftest let us run

    real.nvmlInit()
    yield real
    real.nvmlShutdown()
