"""The report's time range: ``--since 7d`` or ``--start``/``--end``, and its daily chunks."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone

__all__ = ["TimeRange", "chunks", "format_duration", "parse_duration", "parse_time"]

_UNITS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
#: Longest range a report asks for (a year of 1-minute records is 525,600 samples a series).
MAX_RANGE_SECONDS = 366 * 86400
CHUNK_SECONDS = 86400


def parse_duration(text: str) -> int:
    """``7d``, ``36h``, ``1d12h``, ``90m``, ``2w`` -> seconds.

    Raises:
        ValueError: not a positive duration of w/d/h/m/s parts, in that order.
    """
    match = _DURATION.fullmatch(text.strip())
    if not text.strip() or match is None or not any(match.groups()):
        raise ValueError(f"{text!r} is not a duration like 7d, 36h, 1d12h or 90m")
    total = sum(int(v) * _UNITS[u] for v, u in zip(match.groups(), "wdhms", strict=True) if v)
    if total <= 0:
        raise ValueError(f"{text!r} is not a positive duration")
    return total


def parse_time(text: str) -> float:
    """RFC 3339 (``2026-12-01T00:00:00Z``), a date (``2026-12-01``, UTC) or Unix seconds.

    Raises:
        ValueError: none of those.
    """
    value = text.strip()
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is not a time: use RFC 3339 (2026-12-01T00:00:00Z), a date "
            "(2026-12-01, UTC) or Unix seconds") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def format_duration(seconds: float) -> str:
    """``7d``, ``1d12h``, ``3h20m``, ``45s``: the largest two units."""
    left = round(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            parts.append(f"{left // size}{unit}")
            left %= size
    return "".join(parts[:2]) or "0s"


@dataclass(frozen=True, slots=True)
class TimeRange:
    """``[start, end]`` in Unix seconds."""

    start: float
    end: float

    @property
    def seconds(self) -> float:
        """Its length."""
        return self.end - self.start

    @classmethod
    def resolve(cls, since: str | None, start: str | None, end: str | None,
                now: float | None = None) -> TimeRange:
        """From the flags: ``--since`` alone, or ``--start`` with an optional ``--end``.

        Raises:
            ValueError: unparsable values, both forms at once, an empty or reversed range,
                or one longer than a year.
        """
        now = time.time() if now is None else now
        if since is not None and start is not None:
            raise ValueError("give --since or --start/--end, not both")
        stop = parse_time(end) if end is not None else now
        begin = parse_time(start) if start is not None else stop - parse_duration(since or "7d")
        if begin >= stop:
            raise ValueError(f"empty range: start {iso(begin)} is not before end {iso(stop)}")
        if stop - begin > MAX_RANGE_SECONDS:
            raise ValueError("the range is longer than a year; ask for less")
        if begin > now:
            raise ValueError(f"the range starts in the future ({iso(begin)})")
        # Whole seconds: the chunks' windows then meet exactly at millisecond precision.
        return cls(math.floor(begin), math.floor(min(stop, now)))


def iso(seconds: float) -> str:
    """UTC time as ``2026-12-02 19:00 UTC``."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def chunks(span: TimeRange, size: float = CHUNK_SECONDS) -> list[TimeRange]:
    """The range cut into pieces of ``size`` seconds from its start (the last may be shorter)."""
    pieces = []
    at = span.start
    while at < span.end:
        pieces.append(TimeRange(at, min(at + size, span.end)))
        at += size
    return pieces
