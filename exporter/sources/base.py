"""The interface every source implements."""

from __future__ import annotations

from typing import Protocol

from exporter.catalogue.metrics.core import Group
from exporter.snapshot import Snapshot


class SourceUnavailable(Exception):
    """The source cannot work at all right now (library missing, init failed).

    Raised by ``Source.start``; the scheduler keeps serving a ``source_up=False`` snapshot and
    retries ``start`` with backoff. The message is shown to users: make it say what to fix.
    """


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

    def collect(self, groups: frozenset[Group]) -> Snapshot:
        """Read every GPU once: the metrics of ``groups`` (rows of other groups stay absent).

        Raises:
            SourceUnavailable: the whole source failed; ``start`` must succeed again first.
        """
        ...

    def close(self) -> None:
        """Release resources (idempotent)."""
        ...


def boot_time(stat: str = "/proc/stat") -> float | None:
    """The host's boot time in Unix seconds, ``btime`` of ``/proc/stat`` (the host's in a
    container too; None: unreadable): NVML's counters that count since the driver loaded start
    about then (the driver loads at boot; a later reload resets them, which Prometheus reads as
    a counter reset)."""
    try:
        with open(stat, "rb") as lines:
            for line in lines:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None
