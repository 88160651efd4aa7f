"""The command's entry point: catch SIGTERM/SIGINT before the slow imports.

Importing FastAPI, pydantic and uvicorn takes ~1 s; a SIGTERM in that window (a pod deleted
right after it started) used to kill the process by the signal (exit 143). The handler here
only records the request (and stops a running server), so the exporter exits 0 instead.
Nothing heavy is imported by this module.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

__all__ = ["StopRequest", "install_stop_handler", "main"]


class StopRequest:
    """Whether SIGTERM/SIGINT arrived, and the server to stop when it does."""

    requested = False
    server: Any = None  # a uvicorn.Server once one runs (it polls ``should_exit``)


def _handler(signum: int, frame: FrameType | None) -> None:
    StopRequest.requested = True
    if StopRequest.server is not None:
        StopRequest.server.should_exit = True


def install_stop_handler() -> None:
    """Record SIGTERM/SIGINT instead of dying by them (idempotent)."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _handler)


def main() -> int:
    """``gpu-exporter`` and ``python -m exporter``."""
    install_stop_handler()
    from exporter.cli import main as run  # noqa: PLC0415 (after the handler, on purpose)

    return run()
