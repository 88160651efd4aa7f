"""The values flags and the web config take: a parser per kind, and the range of every number.

Each parser turns the text of a flag, an environment variable or a web config key into a value,
or raises ``ValueError`` with a short reason that the caller prefixes with the flag's name.
``RANGES`` holds every number's range: what the code behind it can represent, never inf or nan.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from exporter.catalogue.defaults import (
    MAX_MESSAGE_BYTES_LIMIT,
    MIN_INTERVAL_SECONDS,
    MIN_MESSAGE_BYTES,
)

_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(text: str) -> float:
    """Parse a Prometheus-style duration ("500ms", "5s", "1m30s", "0") into seconds.

    A leading "-" gives a negative number, and a count of hundreds of digits gives inf: the
    range check (``RANGES``) then refuses either with the flag's range.

    Raises:
        ValueError: the text is not a duration.
    """
    value = text.strip()
    negative = value.startswith("-")
    body = value[1:] if negative else value
    if body == "0":
        return 0.0
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(body):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if pos == 0 or pos != len(body):
        raise ValueError(f"{text!r} is not a duration (use e.g. 500ms, 5s, 1m)")
    return -total if negative else total


def parse_bool(text: str) -> bool:
    """Parse true/false/1/0/yes/no (any case).

    Raises:
        ValueError: anything else.
    """
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"{text!r} is not a boolean (use true or false)")


def parse_int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an integer") from None


def parse_float(text: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None


def parse_choice(choices: Sequence[str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise ValueError(f"{text!r} is not one of {', '.join(choices)}")
        return value

    return parse


def parse_path(text: str) -> str:
    if not text.strip():
        raise ValueError("empty path")
    return text


def parse_names(text: str) -> frozenset[str]:
    """Comma-separated names (blanks ignored)."""
    return frozenset(name.strip() for name in text.split(",") if name.strip())


def parse_optional_path(text: str) -> str:
    """A path, or "" to switch the feature off."""
    return text.strip()


def parse_hostname(text: str) -> str:
    value = text.strip()
    if not value or any(c.isspace() for c in value):
        raise ValueError(f"{text!r} is not a host name")
    return value


def format_duration(seconds: float) -> str:
    """Seconds as the shortest duration text ``parse_duration`` reads back ("1d", "500ms")."""
    if seconds == 0:
        return "0s"
    for unit in ("w", "d", "h", "m", "s", "ms"):
        count = seconds / _DURATION_UNITS[unit]
        if count >= 1 and abs(count - round(count)) < 1e-9:
            return f"{round(count)}{unit}"
    return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"


@dataclass(frozen=True, slots=True)
class Range:
    """The values a number may take, both ends included; inf and nan are never in range."""

    low: float
    high: float
    duration: bool = False  # shown as durations ("1ms to 1d")

    def _text(self, value: float) -> str:
        return format_duration(value) if self.duration else str(value)

    def __str__(self) -> str:
        return f"{self._text(self.low)} to {self._text(self.high)}"

    def check(self, value: float, text: str) -> None:
        """Raises ValueError naming the range when ``value`` (read from ``text``) is outside."""
        finite = not isinstance(value, float) or math.isfinite(value)  # huge ints compare
        if not (finite and self.low <= value <= self.high):
            shown = text.strip()
            shown = shown if len(shown) <= 40 else f"{shown[:20]}...{shown[-10:]}"
            raise ValueError(f"{shown!r} is out of range ({self})")


_HOUR, _DAY = 3600.0, 86400.0
_GO_DURATION_MAX = 9_223_372_036.0  # whole seconds of Go's time.Duration (int64 ns)


def _seconds(low: float, high: float) -> Range:
    return Range(low, high, duration=True)


#: Every number the exporter reads from a flag, an environment variable or the web config,
#: by flag name (or web config key): what the code behind it can represent (timeouts that
#: threading, asyncio and time_t accept, counts that fit), with a margin for what makes sense.
#: A value outside is refused at start (exit 2, one line naming the flag and this range).
RANGES: Mapping[str, Range] = {
    "web.max-requests": Range(0, 100_000),
    "web.max-other-requests": Range(0, 100_000),
    "web.max-connections": Range(1, 1 << 20),  # Linux's default ceiling of open files
    "web.read-header-timeout": _seconds(0.001, _DAY),
    "web.idle-timeout": _seconds(0.001, _DAY),
    "web.timeout-offset": _seconds(0, _HOUR),
    "simulate.seed": Range(0, 2**63 - 1),
    "simulate.speed": Range(0.001, 1_000_000),
    "collector.min-interval": _seconds(0, _DAY),
    "collector.timeout": _seconds(0.001, _HOUR),
    "collector.stale-after": _seconds(0.001, 7 * _DAY),
    "process.max-series-per-gpu": Range(1, 1_000_000),
    "torch.max-age": _seconds(0.001, 7 * _DAY),
    "torch.max-files": Range(1, 1_000_000),
    "kubernetes.pod-resources-interval": _seconds(MIN_INTERVAL_SECONDS, _DAY),
    "kubernetes.pod-resources-max-bytes": Range(MIN_MESSAGE_BYTES, MAX_MESSAGE_BYTES_LIMIT),
    # --web.config.file (exporter/web/webconfig.py): what Go's time.Duration and int hold, as
    # exporter-toolkit reads them (an interval of 0 or less turns the limit off)
    "rate_limit.interval": _seconds(-_GO_DURATION_MAX, _GO_DURATION_MAX),
    "rate_limit.burst": Range(-(2**63), 2**63 - 1),
}


def check_range(name: str, value: float, text: str | None = None) -> float:
    """``value`` if it lies in ``RANGES[name]``.

    Raises:
        ValueError: outside the range, or inf/nan (the message names the range).
    """
    RANGES[name].check(value, str(value) if text is None else text)
    return value


@dataclass(frozen=True, slots=True)
class ListenAddress:
    """Where to listen. ``host`` is None for ``:port`` (every interface)."""

    host: str | None
    port: int

    def __str__(self) -> str:
        if self.host is None:
            return f":{self.port}"
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_listen_address(text: str) -> ListenAddress:
    """Parse ``host:port``, ``[v6]:port`` or ``:port`` (every interface).

    Raises:
        ValueError: not one of those forms, or a port outside 0..65535.
    """
    value = text.strip()
    match = re.fullmatch(r"\[([0-9A-Fa-f:.%a-zA-Z]+)\]:(\d{1,5})|([^:\[\]\s]*):(\d{1,5})", value)
    if match is None:
        raise ValueError(f"{text!r} is not host:port, [ipv6]:port or :port")
    host = match.group(1) if match.group(1) is not None else match.group(3)
    port = int(match.group(2) or match.group(4))
    if port > 65535:
        raise ValueError(f"port {port} is out of range (0-65535)")
    return ListenAddress(host=host or None, port=port)
