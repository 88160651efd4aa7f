"""The answers of Prometheus's HTTP API the report reads, validated in one place.

Each answer is checked against the documented shape (``status``/``data``; a query's
``resultType`` and ``result``; ``/api/v1/series``; ``/api/v1/rules`` groups) and turned into
plain typed values. Anything else (``data`` null, a sample without ``metric``, a rule group
whose ``interval`` is a mapping, a value that is not a number) is an ``AnswerError``: one
line naming the endpoint and what was wrong, never a traceback. Sample values are kept as
Prometheus wrote them (NaN and infinities included); the report decides what it can use
(``collect.usable``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["AnswerError", "ReportError", "RuleGroup", "Sample", "data_of", "instant_samples",
           "rule_groups", "series", "short"]


class ReportError(Exception):
    """A problem the user must fix; the message is one line."""


class AnswerError(ReportError):
    """Prometheus answered something the API does not (one line)."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One series of an instant-query answer."""

    labels: dict[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class RuleGroup:
    """A rule group: its name and its evaluation interval (None: the global one)."""

    name: str
    interval_seconds: float | None


def short(text: str, limit: int = 60) -> str:
    """``text`` on one line, cut to ``limit`` characters (a query named in an error)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def _fail(where: str, problem: str) -> AnswerError:
    return AnswerError(f"unexpected answer from Prometheus to {where}: {problem}")


def data_of(doc: Any, where: str) -> Any:
    """The ``data`` of a successful answer.

    Raises:
        ReportError: an error answer (its ``error``, on one line) or no ``data``.
    """
    if not isinstance(doc, dict):
        raise _fail(where, f"a JSON {type(doc).__name__}, not an object")
    if doc.get("status") != "success":
        error = doc.get("error")
        detail = short(str(error), 200) if error is not None else "no error given"
        raise ReportError(f"Prometheus answered an error for {where}: {detail}")
    if doc.get("data") is None:
        raise _fail(where, "no data")
    return doc["data"]


def _labels(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise _fail(where, "a sample without its metric labels")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise _fail(where, "metric labels that are not strings")
    return dict(value)


def _value(pair: Any, where: str) -> float:
    """A ``[timestamp, "value"]`` pair's value (NaN and infinities included)."""
    if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[1], str):
        raise _fail(where, "a sample value that is not [time, \"number\"]")
    try:
        return float(pair[1])
    except ValueError:
        raise _fail(where, f"a sample value {short(pair[1], 30)!r} that is not a number"
                    ) from None


def instant_samples(data: Any, expr: str) -> list[Sample]:
    """The samples of an instant query's ``data`` (a vector, or a scalar as one sample).

    Raises:
        AnswerError: another result type, or a malformed result.
    """
    where = f"the query {short(expr)}"
    if not isinstance(data, dict):
        raise _fail(where, "data is not an object")
    kind, result = data.get("resultType"), data.get("result")
    if kind == "vector":
        if not isinstance(result, list):
            raise _fail(where, "a vector that is not a list")
        samples = []
        for item in result:
            if not isinstance(item, dict):
                raise _fail(where, "a sample that is not an object")
            samples.append(Sample(_labels(item.get("metric"), where),
                                  _value(item.get("value"), where)))
        return samples
    if kind == "scalar":
        return [Sample({}, _value(result, where))]
    raise _fail(where, f"a {short(str(kind), 20)} result, not a vector")


def series(data: Any) -> list[dict[str, str]]:
    """The label sets of a ``/api/v1/series`` answer."""
    where = "/api/v1/series"
    if not isinstance(data, list):
        raise _fail(where, "data is not a list")
    return [_labels(item, where) for item in data]


def rule_groups(data: Any) -> list[RuleGroup]:
    """The groups of a ``/api/v1/rules`` answer."""
    where = "/api/v1/rules"
    groups = data.get("groups") if isinstance(data, dict) else None
    if not isinstance(groups, list):
        raise _fail(where, "no list of groups")
    out = []
    for group in groups:
        if not isinstance(group, dict) or not isinstance(group.get("name"), str):
            raise _fail(where, "a group without a name")
        interval = group.get("interval")
        if interval is not None and (isinstance(interval, bool)
                                     or not isinstance(interval, (int, float))
                                     or not math.isfinite(interval) or interval < 0):
            raise _fail(where, f"group {short(group['name'], 40)!r} has interval "
                        f"{short(repr(interval), 30)}, not a number of seconds")
        out.append(RuleGroup(group["name"], float(interval) if interval else None))
    return out
