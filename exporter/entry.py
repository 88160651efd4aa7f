"""The command's entry point: the signal handlers (``exporter.signals``) first, then the CLI
and its slow imports, so a SIGTERM during start-up already ends the process cleanly."""

from __future__ import annotations

from exporter.signals import Stopping, install_stop_handler

__all__ = ["main"]


def main() -> int:
    """``gpu-exporter`` and ``python -m exporter``."""
    install_stop_handler()
    try:
        from exporter.cli import main as run  # noqa: PLC0415 (after the handler, on purpose)

        return run()
    except Stopping:
        return 0
