"""The command's entry point: the signal handlers (``exporter.signals``) first, then the CLI
and its slow imports, so a SIGTERM or SIGINT during start-up already ends the process
cleanly; a minimal handler covers even the loading of ``exporter.signals``."""

from __future__ import annotations

import signal
from types import FrameType


def _stop_while_loading(_signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(0)


# Before anything else loads (Python's own SIGINT handler would print a KeyboardInterrupt
# traceback): SIGTERM or SIGINT while the modules below load is a quiet exit 0.
signal.signal(signal.SIGTERM, _stop_while_loading)
signal.signal(signal.SIGINT, _stop_while_loading)

from exporter.signals import Stopping, StopRequest, install_stop_handler  # noqa: E402

__all__ = ["main"]


def main() -> int:
    """``gpu-exporter`` and ``python -m exporter``."""
    install_stop_handler()
    try:
        from exporter.cli import main as run  # noqa: PLC0415 (after the handler, on purpose)

        return run()
    except Stopping:
        return 0
    except Exception:
        # Stopping raised inside an extension module can come back as that module's own
        # error (pydantic-core turns it into a SchemaError while FastAPI's models build).
        if StopRequest.requested:
            return 0
        raise
