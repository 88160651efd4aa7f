"""Fast encoding of ``FamilyData`` in whatever format prometheus_client negotiated.

prometheus_client's encoders sort and escape every label of every sample; for a host with
hundreds of process series that alone takes ~8 ms. Here the per-family work is done once:
for each (family, label names) the real encoder is run on an empty family (giving the exact
HELP/TYPE/UNIT lines) and on a one-sample family whose label values are markers (giving the
exact sample line with names escaped and labels sorted by prometheus_client itself). The
sample line becomes a ``str.format`` template; per sample only the label values are escaped
(backslash, newline, double quote: what both encoders do to label values) and the value is
formatted exactly like prometheus_client's ``floatToGoString``. Tests prove byte equality.

Consecutive snapshots mostly repeat lines (identity, limits, start times, steady memory), so
each encoder keeps the lines of its previous call, keyed by (family template, label values,
value), and reuses those that come again; only the latest call's lines are kept, and a line
is only ever written for a sample present in the families being encoded.

A family whose templates cannot be derived that way falls back to the real encoder.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from math import copysign
from typing import cast

from prometheus_client import utils
from prometheus_client.metrics_core import Metric as Family

from exporter.exposition.families import FamilyData, Row
from exporter.metrics import Kind, Metric

__all__ = ["EOF", "Encoder", "Families", "FastEncoder"]

Encoder = Callable[..., bytes]  # prometheus_client encoders take any object with collect()
EOF = "# EOF\n"
_MARK = "\x00"  # label values never contain NUL in our data; the encoders leave it as is
_PROBE = 1.0  # the sample value of the probe family, formatted "1.0" by both encoders
#: prometheus_client's value formatting (untyped upstream), used by both of its encoders.
go_float = cast(Callable[[float], str], utils.floatToGoString)


def format_value(value: float) -> str:
    """Exactly ``floatToGoString(value)``, with the common finite cases inlined."""
    d = float(value)
    text = repr(d)
    if text[-1] in "fn":  # inf, -inf, nan: Go spells them differently
        return go_float(d)
    dot = text.find(".")
    if d > 0 and dot > 6:  # Go switches to exponents sooner than Python
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text
_PROBE_TAIL = f" {format_value(_PROBE)}\n"


class Families:
    """A minimal registry stand-in: prometheus_client's encoders only call ``collect()``."""

    def __init__(self, families: Iterable[Family]) -> None:
        self._families = families

    def collect(self) -> Iterable[Family]:
        return self._families


def escape_label_value(value: str) -> str:
    """Label value escaping of both text formats: backslash, newline, double quote."""
    if _needs_escape(value):
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def _needs_escape(text: str) -> bool:
    return "\\" in text or "\n" in text or '"' in text


@dataclass(frozen=True, slots=True)
class _Template:
    """How one family's samples are written in one format."""

    header: str  # the exact HELP/TYPE(/UNIT) lines
    name: str  # sample name as written before the labels
    labels: str  # ``str.format`` template of the label set ("" without labels)
    fixed_value: str | None  # info samples: always this value


class FastEncoder:
    """Encodes families for one negotiated format; thread-safe, templates cached per family.

    ``encoder`` is what ``prometheus_client.exposition.choose_encoder`` returned and
    ``openmetrics`` says whether it writes OpenMetrics (whose ``# EOF`` is left off here:
    the renderer appends the self-metrics part, which carries it).
    """

    def __init__(self, encoder: Encoder, openmetrics: bool) -> None:
        self._encoder = encoder
        self.openmetrics = self._openmetrics = openmetrics
        self._templates: dict[tuple[Metric, tuple[str, ...]], _Template | str] = {}
        self._lock = threading.RLock()
        self._lines: dict[_Template, dict[Row, str]] = {}  # the last call's lines
        # The last call's whole text (header included) of each family, with its rows.
        # (rows, text, indices of the rows whose value is 0: only these can differ in sign)
        self._texts: dict[_Template, tuple[list[Row], str, list[int]]] = {}

    def _real(self, families: Iterable[Family]) -> str:
        text = self._encoder(Families(families)).decode("utf-8")
        return text.removesuffix(EOF) if self._openmetrics else text

    def _derive(self, data: FamilyData) -> _Template | str:
        """The family's template, or just its header when no template could be derived."""
        header = self._real([FamilyData(data.metric, data.labels).to_family()])
        markers = tuple(f"{_MARK}{i}{_MARK}" for i in range(len(data.labels)))
        probe = FamilyData(data.metric, data.labels, [(markers, _PROBE)])
        line = self._real([probe.to_family()]).removeprefix(header)
        if line.count("\n") != 1 or not line.endswith(_PROBE_TAIL):
            return header
        body = line.removesuffix(_PROBE_TAIL)
        cut = body.find("{") if markers else len(body)
        name, labels = body[:cut], body[cut:]
        if cut < 0 or _MARK in name or "{" in name or "}" in name:
            return header
        labels = labels.replace("{", "{{").replace("}", "}}")
        for i, marker in enumerate(markers):
            if labels.count(marker) != 1:
                return header
            labels = labels.replace(marker, f"{{{i}}}")
        if _MARK in labels:
            return header
        fixed = format_value(_PROBE) if data.metric.kind is Kind.INFO else None
        return _Template(header, name, labels, fixed)

    def _template(self, data: FamilyData) -> _Template | str:
        key = (data.metric, data.labels)
        found = self._templates.get(key)
        if found is None:
            with self._lock:
                found = self._templates.get(key)
                if found is None:
                    found = self._templates[key] = self._derive(data)
        return found

    def encode(self, families: Iterable[FamilyData]) -> str:
        """The encoder's output for ``families`` (without OpenMetrics' ``# EOF``)."""
        return "".join(self.encode_parts(families))

    def encode_parts(self, families: Iterable[FamilyData]) -> list[str]:
        """``encode``'s output as one text per family, in order.

        A family equal to the previous call's gets the very same ``str`` object back, so
        callers can reuse work done for it by identity (the renderer's gzip chunks).
        """
        with self._lock:  # the line memo below is swapped per call
            return self._encode(families)

    def _encode(self, families: Iterable[FamilyData]) -> list[str]:
        parts: list[str] = []
        # Label sets repeat across families (per-GPU labels, process labels): render once.
        rendered: dict[str, dict[tuple[str, ...], str]] = {}
        # Most lines repeat from one snapshot to the next (identity, limits, start times,
        # steady memory): reuse the previous call's lines, keeping only those seen again.
        previous, previous_texts = self._lines, self._texts
        kept: dict[_Template, dict[Row, str]] = {}
        texts: dict[_Template, tuple[list[Row], str, list[int]]] = {}
        for data in families:
            template = self._template(data)
            if isinstance(template, str):
                parts.append(self._real([data.to_family()]))
                continue
            rows = data.rows
            before = previous.get(template, {})
            prior = previous_texts.get(template)
            # A family equal to the last call's (identity, limits, start times, idle
            # GPUs) is written as it was then; -0.0 equals 0 but is written differently.
            if (prior is not None and template not in kept and prior[0] == rows
                    and not _negative_zero(rows, prior[2])):
                parts.append(prior[1])
                kept[template] = before
                texts[template] = prior
                continue
            signed, zeros = False, []
            out = [template.header]
            append = out.append
            name, labels, fixed = template.name, template.labels, template.fixed_value
            memo = rendered.setdefault(labels, {})
            lines = kept.setdefault(template, {})
            for index, (values, value) in enumerate(rows):
                # 0 and -0.0 are equal keys but are written differently: never reused.
                line = before.get((values, value)) if value else None
                if line is None:
                    label_text = memo.get(values)
                    if label_text is None:
                        safe = values
                        if _needs_escape("".join(values)):
                            safe = tuple(map(escape_label_value, values))
                        label_text = memo[values] = labels.format(*safe)
                    text = fixed if fixed is not None else format_value(value)
                    line = f"{name}{label_text} {text}\n"
                if value:
                    lines[(values, value)] = line
                else:
                    zeros.append(index)
                    signed = signed or copysign(1.0, value) < 0
                append(line)
            part = "".join(out)
            parts.append(part)
            if not signed:  # a text with -0.0 in it must not stand in for equal rows with 0
                texts[template] = (rows, part, zeros)
        self._lines, self._texts = kept, texts
        return parts


def _negative_zero(rows: list[Row], zeros: list[int]) -> bool:
    """True when the value of a row at one of ``zeros`` is -0.0."""
    return any(copysign(1.0, rows[index][1]) < 0 for index in zeros)
