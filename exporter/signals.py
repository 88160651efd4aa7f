"""Signal handling, installed by the entry point before the slow imports.

SIGTERM and SIGINT end the exporter within ``STOP_DEADLINE_SECONDS`` in every state:

- while it starts (imports, reading files, building the source), the handler raises
  ``Stopping`` in the main thread. A blocked system call (an ``open`` or ``read``) is
  interrupted by the signal, and Python restarts it when the handler returns (PEP 475): only a
  handler that raises ends it. The CLI catches ``Stopping`` and exits 0;
- once the server runs, uvicorn's own handler (or ours, which stops the server) shuts it down
  gracefully: open requests get up to ``SHUTDOWN_GRACE_SECONDS`` (``exporter.cli``);
- either way, the first signal starts a deadline: whatever still runs after it (a collection
  hung in NVML, a thread stuck in a read) the process exits then.

SIGHUP (whose default action would end the process) calls the reload the CLI registers once
its files are loaded (web config and passwd file, ``StopRequest.reload``); before that it is
ignored with one log line.

Nothing heavy is imported by this module.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["STOP_DEADLINE_SECONDS", "StopRequest", "Stopping", "install_stop_handler"]

#: Seconds from the first SIGTERM/SIGINT to the exit, whatever is still running.
STOP_DEADLINE_SECONDS = 4.5


class Stopping(BaseException):
    """SIGTERM or SIGINT arrived while the exporter was starting."""


class StopRequest:
    """Whether SIGTERM/SIGINT arrived, the server to stop when it does, and the reload."""

    requested = False
    starting = True  # raise Stopping on a signal (until the server runs)
    server: Any = None  # a uvicorn.Server once one runs (it polls ``should_exit``)
    reload: Callable[[], None] | None = None  # SIGHUP, once the files are loaded
    deadline: threading.Timer | None = None


def _exit_now() -> None:
    # Written straight to the descriptor, and only if that cannot block: a main thread stuck
    # writing to a full stderr pipe may hold the logging lock.
    message = (b"gpu-exporter: still running %.1f s after SIGTERM/SIGINT; exiting now\n"
               % STOP_DEADLINE_SECONDS)
    try:
        if select.select([], [2], [], 0)[1]:
            os.write(2, message)
    except (OSError, ValueError):
        pass
    os._exit(0)


def _stop(signum: int, _frame: FrameType | None) -> None:
    if not StopRequest.requested:
        StopRequest.requested = True
        timer = threading.Timer(STOP_DEADLINE_SECONDS, _exit_now)
        timer.daemon = True
        timer.start()
        StopRequest.deadline = timer
    if StopRequest.server is not None:
        StopRequest.server.should_exit = True
    elif StopRequest.starting:
        StopRequest.starting = False
        raise Stopping(signum)


def _hang_up(_signum: int, _frame: FrameType | None) -> None:
    reload = StopRequest.reload
    if reload is None:
        logging.getLogger("exporter").warning(
            "SIGHUP while starting: ignored (the files are being read now)")
        return
    reload()


def install_stop_handler() -> None:
    """Handle SIGTERM/SIGINT/SIGHUP as the module docstring says; resets the state (the CLI
    may run more than once in one process, as in tests)."""
    StopRequest.requested = False
    StopRequest.starting = True
    StopRequest.server = None
    StopRequest.reload = None
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _stop)
    signal.signal(signal.SIGHUP, _hang_up)
