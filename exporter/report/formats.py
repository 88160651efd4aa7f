"""The report as text (a terminal table), Markdown, CSV and JSON. HTML is in ``html.py``.

Text and Markdown show hours (GPU-hours, GiB-hours) and kWh; CSV and JSON keep numbers
machine-friendly (CSV in hours and kWh with explicit column names, JSON in base units).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from exporter.catalogue import records
from exporter.report.model import GIB, HOUR, ProcessRow, Report, Row, Usage
from exporter.report.timerange import format_duration, iso

__all__ = ["csv_text", "json_text", "markdown", "sections", "summary_lines", "text"]

KWH = 3.6e6


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f} %"


USAGE_COLUMNS: tuple[tuple[str, Callable[[Usage], str]], ...] = (
    ("idle GPU-h", lambda u: _num(u.idle_gpu_seconds / HOUR)),
    ("idle GiB-h", lambda u: _num(u.idle_byte_seconds / GIB / HOUR)),
    ("held GPU-h", lambda u: _num(u.held_gpu_seconds / HOUR)),
    ("used GPU-h", lambda u: _num(u.used_gpu_seconds / HOUR)),
    ("used/held", lambda u: _pct(u.used_ratio)),
    ("held GiB-h", lambda u: _num(u.held_byte_seconds / GIB / HOUR)),
)
ENERGY_COLUMN = ("energy kWh", lambda u: _num(None if u.energy_joules is None
                                               else u.energy_joules / KWH, 2))


def _ago(report: Report, at: float | None) -> str:
    return "-" if at is None else format_duration(max(0.0, report.end - at))


def _process_cells(report: Report, p: ProcessRow) -> list[str]:
    pod = f"{p.labels.get('namespace', '')}/{p.labels['pod']}" if p.labels.get("pod") else "-"
    host = p.labels.get("node") or p.labels.get("instance", "-")
    idle_for = _ago(report, p.last_active_at) if p.running_at_end else "ended"
    return [
        host, p.labels.get("gpu", "-"), p.labels.get("pid", "-"), p.labels.get("process", "-"),
        p.labels.get("user", "-"), pod, _num(p.idle_byte_seconds / GIB / HOUR),
        _num(p.idle_seconds / HOUR), _num(p.peak_idle_bytes / GIB),
        _ago(report, p.started_at), idle_for,
    ]


PROCESS_HEADER = ["host", "gpu", "pid", "process", "user", "pod", "idle GiB-h", "idle h",
                  "GiB", "age", "idle for"]


def sections(report: Report) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of every table, in print order; empty tables left out."""
    out: list[tuple[str, list[str], list[list[str]]]] = []

    def usage_table(title: str, keys: Sequence[str], rows: list[Row], energy: bool) -> None:
        if not rows:
            return
        columns = (*USAGE_COLUMNS, ENERGY_COLUMN) if energy else USAGE_COLUMNS
        header = ["#", *keys, *(name for name, _ in columns)]
        body = [
            [str(i), *(row.labels.get(k, "") or "-" for k in keys),
             *(cell(row.usage) for _, cell in columns)]
            for i, row in enumerate(rows, 1)
        ]
        out.append((title, header, body))

    usage_table("Idle GPU time by user", ["user"], report.users, energy=True)
    usage_table("Idle GPU time by namespace/pod", ["namespace", "pod"], report.pods, False)
    usage_table("Idle GPU time by job", [records.JOB_LABEL, "user"], report.jobs, False)
    if report.processes:
        out.append((
            "Top forgotten processes (memory held through their longest idle stretch)",
            ["#", *PROCESS_HEADER],
            [[str(i), *_process_cells(report, p)] for i, p in enumerate(report.processes, 1)],
        ))
    return out


def summary_lines(report: Report) -> list[str]:
    """The heading lines: range, source, totals."""
    t = report.totals
    energy = "" if t.energy_joules is None else f", energy {t.energy_joules / KWH:,.2f} kWh"
    return [
        f"GPU idle report {iso(report.start)} to {iso(report.end)} "
        f"({format_duration(report.end - report.start)})",
        f"Prometheus {report.prometheus_url}"
        + (f", series matching {{{report.matchers}}}" if report.matchers else ""),
        f"Held {t.held_gpu_seconds / HOUR:,.1f} GPU-h, used {t.used_gpu_seconds / HOUR:,.1f} "
        f"GPU-h ({_pct(t.used_ratio)}); idle {t.idle_gpu_seconds / HOUR:,.1f} GPU-h and "
        f"{t.idle_byte_seconds / GIB / HOUR:,.1f} GiB-h{energy}",
        *report.notes,
    ]


def _aligned(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(c) for c in col) for col in zip(header, *rows, strict=True)]
    numeric = [all(_looks_numeric(row[i]) for row in rows) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if n else c.ljust(w)
                         for c, w, n in zip(cells, widths, numeric, strict=True)).rstrip()

    return [line(header), "  ".join("-" * w for w in widths), *(line(row) for row in rows)]


def _looks_numeric(cell: str) -> bool:
    return cell == "-" or cell.replace(",", "").replace(".", "").replace(" %", "").isdigit()


def text(report: Report) -> str:
    """A readable terminal table."""
    lines = summary_lines(report)
    for title, header, rows in sections(report):
        lines += ["", title, *_aligned(header, rows)]
    lines += ["", "Idle: SM utilisation under the idle threshold over each minute. GPU-h "
              "held idle: a GPU idling while processes hold it, split by memory held."]
    return "\n".join(lines) + "\n"


def _md_cell(cell: str) -> str:
    return cell.replace("|", "\\|")


def markdown(report: Report) -> str:
    """GitHub-flavoured Markdown."""
    head = summary_lines(report)
    lines = [f"# {head[0]}", "", *(f"{line}  " for line in head[1:])]
    for title, header, rows in sections(report):
        right = ["---:" if all(_looks_numeric(row[i]) for row in rows) else "---"
                 for i in range(len(header))]
        lines += ["", f"## {title}", "", "| " + " | ".join(header) + " |",
                  "| " + " | ".join(right) + " |"]
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


CSV_COLUMNS = ["section", "user", "namespace", "pod", records.JOB_LABEL, "instance", "gpu", "pid",
               "process", "idle_gpu_hours", "idle_gib_hours", "held_gpu_hours",
               "held_gib_hours", "used_gpu_hours", "energy_kwh", "idle_hours",
               "peak_idle_gib", "started_unix", "last_active_unix", "running_at_end", "note"]


def _usage_csv(u: Usage) -> dict[str, Any]:
    return {
        "idle_gpu_hours": round(u.idle_gpu_seconds / HOUR, 6),
        "idle_gib_hours": round(u.idle_byte_seconds / GIB / HOUR, 6),
        "held_gpu_hours": round(u.held_gpu_seconds / HOUR, 6),
        "held_gib_hours": round(u.held_byte_seconds / GIB / HOUR, 6),
        "used_gpu_hours": round(u.used_gpu_seconds / HOUR, 6),
        "energy_kwh": "" if u.energy_joules is None else round(u.energy_joules / KWH, 6),
    }


def csv_text(report: Report) -> str:
    """One CSV table: a ``section`` column (total, user, pod, job, process), hours and kWh."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, CSV_COLUMNS, restval="", extrasaction="ignore",
                            lineterminator="\n")
    writer.writeheader()
    writer.writerow({"section": "total", **_usage_csv(report.totals)})
    for section, rows in (("user", report.users), ("pod", report.pods), ("job", report.jobs)):
        for row in rows:
            writer.writerow({"section": section, **row.labels, **_usage_csv(row.usage)})
    for p in report.processes:
        writer.writerow({
            "section": "process", **p.labels,
            "idle_gib_hours": round(p.idle_byte_seconds / GIB / HOUR, 6),
            "idle_hours": round(p.idle_seconds / HOUR, 6),
            "peak_idle_gib": round(p.peak_idle_bytes / GIB, 6),
            "started_unix": "" if p.started_at is None else p.started_at,
            "last_active_unix": "" if p.last_active_at is None else p.last_active_at,
            "running_at_end": str(p.running_at_end).lower(),
        })
    for note in report.notes:
        writer.writerow({"section": "note", "note": note})
    return buffer.getvalue()


def json_text(report: Report) -> str:
    """The whole report in base units (seconds, bytes, joules), for scripts."""
    doc = asdict(report)
    doc["totals"]["used_ratio"] = report.totals.used_ratio
    # Strict JSON: the model holds finite numbers only (collect.Usable); allow_nan=False
    # makes a slip an error here rather than a bare NaN a parser chokes on.
    return json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"
