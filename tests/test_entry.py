"""The entry point: a stop signal that an extension module wraps in its own error still ends
the start-up with 0; the same error without a signal is not hidden."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

import exporter.cli
from exporter import entry
from exporter.signals import StopRequest


class _WrappedSignal(Exception):
    """What pydantic-core makes of a ``Stopping`` raised while it builds a schema."""


@pytest.fixture(autouse=True)
def _handlers_restored() -> Iterator[None]:
    # entry.main() installs the exporter's handlers in this (pytest's) process.
    saved = {signum: signal.getsignal(signum)
             for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def _failing_start() -> int:
    raise _WrappedSignal("Stopping: 2")


def test_a_wrapped_stop_after_a_signal_is_a_quiet_exit_0(monkeypatch: pytest.MonkeyPatch) -> None:
    def start_interrupted() -> int:
        StopRequest.requested = True  # what the handler records before it raises
        return _failing_start()

    monkeypatch.setattr(exporter.cli, "main", start_interrupted)
    assert entry.main() == 0


def test_the_same_error_without_a_signal_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exporter.cli, "main", _failing_start)
    with pytest.raises(_WrappedSignal):
        entry.main()
