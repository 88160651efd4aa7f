"""The interface every source implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from exporter.snapshot import Snapshot


class SourceUnavailable(Exception):
    """The source cannot work at all right now (library missing, init failed).

    Raised by ``Source.start``; the scheduler keeps serving a ``source_up=False`` snapshot and
    retries ``start`` with backoff. The message is shown to users: make it say what to fix.
    """


@dataclass(frozen=True, slots=True)
class CollectOptions:
    """Which field groups a collection reads. Expensive groups are opt-in."""

    memory: bool = True
    utilization: bool = True
    temperature: bool = True
    power: bool = True
    clocks: bool = True
    throttle: bool = True
    ecc: bool = True
    fan: bool = True
    processes: bool = True
    process_utilization: bool = True  # ~1.8 ms per GPU on an H200
    energy: bool = False  # ~2.8 ms per GPU on an H200
    pcie: bool = False  # ~21 ms per GPU on an H200 (20 ms sampling window)


class Source(Protocol):
    """A producer of snapshots. Implementations: ``nvml.NvmlSource``, ``simulated.SimulatedSource``.

    ``start`` is called (and retried with backoff) until it succeeds; ``collect`` is only called
    after a successful ``start``, from one thread at a time. ``collect`` never raises for one bad
    GPU: it marks that GPU ``up=False`` and carries on. It raises ``SourceUnavailable`` only when
    the whole source broke (then the scheduler calls ``start`` again later).
    """

    name: str

    def start(self) -> None:
        """Initialise (idempotent).

        Raises:
            SourceUnavailable: the source cannot be used now; the message says why.
        """
        ...

    def collect(self, options: CollectOptions) -> Snapshot:
        """Read every GPU once.

        Raises:
            SourceUnavailable: the whole source failed; ``start`` must succeed again first.
        """
        ...

    def close(self) -> None:
        """Release resources (idempotent)."""
        ...
