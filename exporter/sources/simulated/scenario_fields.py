"""Typed, path-aware readers for scenario YAML: each mistake is one clear ``ScenarioError``."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, NoReturn

MiB = 1 << 20
GiB = 1 << 30


class ScenarioError(ValueError):
    """A scenario file or preset is unusable; the message is one line naming file and field."""


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)?\s*$")
_SIZE_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": MiB, "GiB": GiB, "TiB": 1 << 40,
               "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_TIME_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_TIME_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: Bounds far beyond any real scenario, so that absurd values fail here, not in every collection.
MAX_SECONDS = 100 * 365 * 86400.0
MAX_BYTES = 1 << 50  # 1 PiB
MAX_INTEGER = 1 << 32
MAX_TEXT = 256


class Reader:
    """Reads one mapping, remembering where it is (for messages) and which keys it used."""

    def __init__(self, data: object, origin: str, path: str, allowed: tuple[str, ...]) -> None:
        self.origin, self.path = origin, path
        if not isinstance(data, dict):
            self.fail(f"expected a mapping, got {kind(data)}")
        self.data: dict[Any, Any] = data
        unknown = [str(k) for k in data if k not in allowed]
        if unknown:
            self.fail(f"unknown key {unknown[0]!r} (allowed: {', '.join(allowed)})", unknown[0])

    def fail(self, message: str, key: str | None = None) -> NoReturn:
        """Raises:
            ScenarioError: always, naming the file and ``path.key``.
        """
        where = f"{self.path}.{key}" if key and self.path else (key or self.path or "top level")
        raise ScenarioError(f"{self.origin}: {where}: {message}")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def raw(self, key: str, required: bool = False) -> Any:
        if key not in self.data or self.data[key] is None:
            if required:
                self.fail("is required", key)
            return None
        return self.data[key]

    def text(self, key: str, default: str | None = None, required: bool = False) -> str | None:
        value = self.raw(key, required)
        if value is None:
            return default
        if not isinstance(value, str) or not value.strip():
            self.fail(f"expected a non-empty string, got {kind(value)}", key)
        if len(value) > MAX_TEXT:
            self.fail(f"longer than {MAX_TEXT} characters", key)
        if not value.isprintable():  # NUL, newlines, lone surrogates (not UTF-8): never labels
            self.fail(f"has unprintable characters: {value[:40]!a}", key)
        return str(value)

    def number(self, key: str, default: float, low: float | None = 0.0,
               high: float | None = None) -> float:
        value = self.raw(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(f"expected a number, got {kind(value)}", key)
        if not math.isfinite(value) or abs(value) > 1e12:
            self.fail(f"expected a finite number, got {value}", key)
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f"{low if low is not None else '-inf'}..{high if high is not None else 'inf'}"
            self.fail(f"{value} is out of range {bounds}", key)
        return float(value)

    def integer(self, key: str, default: int, low: int = 0, high: int = MAX_INTEGER) -> int:
        value = self.raw(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"expected an integer, got {kind(value)}", key)
        if not low <= value <= high:
            self.fail(f"must be {low}..{high}, got {str(value)[:30]}", key)
        return int(value)

    def _quantity(self, key: str, value: object, pattern: re.Pattern[str],
                  units: Mapping[str, float], *, unit: str, example: str) -> float:
        """A plain number, or a number followed by one of ``units`` (``unit`` when none)."""
        if isinstance(value, bool):
            self.fail(f"expected {example}, got a boolean", key)
        if isinstance(value, (int, float)):
            return float(value)
        match = pattern.match(str(value))
        if not match:
            if str(value).strip().startswith("-"):
                self.fail(f"must not be negative, got {value!r}", key)
            self.fail(f"expected {example}, got {value!r}", key)
        return float(match.group(1)) * units[match.group(2) or unit]

    def seconds(self, key: str, default: float | None, negative: bool = False) -> float | None:
        value = self.raw(key)
        if value is None:
            return default
        result = self._quantity(key, value, _TIME_RE, _TIME_UNITS, unit="s",
                                example="a duration such as 90, 30s, 15m, 2h or 3d")
        if not math.isfinite(result) or abs(result) > MAX_SECONDS:
            self.fail(f"must be finite and within 100 years, got {str(value)[:30]}", key)
        if result < 0 and not negative:
            self.fail(f"must not be negative, got {value!r}", key)
        return result

    def size(self, key: str, default: int) -> int:
        value = self.raw(key)
        if value is None:
            return default
        number = self._quantity(key, value, _SIZE_RE, _SIZE_UNITS, unit="B",
                                example="a size such as 1073741824, 512MiB or 1.5GiB")
        if number < 0:
            self.fail(f"must not be negative, got {value!r}", key)
        if not math.isfinite(number) or number > MAX_BYTES:
            self.fail(f"must be finite and at most 1 PiB, got {str(value)[:30]}", key)
        return int(number)


def kind(value: object) -> str:
    if value is None:
        return "nothing"
    return f"{type(value).__name__} {value!r}"[:60]


def items(value: object, reader: Reader, key: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        reader.fail(f"expected a list, got {kind(value)}", key)
    return value


