"""The report as text (a terminal table), Markdown, CSV and JSON. HTML is in ``html.py``.

Text and Markdown show hours (GPU-hours, GiB-hours), kWh and amounts in the prices' currency;
CSV and JSON keep numbers machine-friendly (CSV in hours, kWh and the currency with explicit
column names, JSON in base units). Every format says how much of the range has data, why a
section is empty, and how the per-user and per-process idle figures differ.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from exporter.catalogue import holders, records, thresholds
from exporter.report.model import GIB, HOUR, ProcessRow, Report, Row, Usage
from exporter.report.timerange import format_duration, iso

__all__ = ["csv_text", "explanation", "json_text", "markdown", "sections", "summary_lines",
           "text"]

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


def cost_columns(currency: str) -> tuple[tuple[str, Callable[[Usage], str]], ...]:
    """The cost columns, in ``currency``: held, used, idle, energy, and their total."""
    return (
        (f"held {currency}", lambda u: _num(u.held_cost, 2)),
        (f"used {currency}", lambda u: _num(u.used_cost, 2)),
        (f"idle {currency}", lambda u: _num(u.idle_cost, 2)),
        (f"energy {currency}", lambda u: _num(u.energy_cost, 2)),
        (f"total {currency}", lambda u: _num(u.total_cost, 2)),
    )


#: Section key -> its title, in print order (the tables of ``sections``).
TITLES = {
    "users": "Idle GPU time by user",
    "pods": "Idle GPU time by namespace/pod",
    "jobs": "Idle GPU time by job",
    "teams": "Cost by team",
    "processes": "Top forgotten processes (memory held through their longest idle stretch)",
}


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
    """(title, header, rows) of every table, in print order; an empty table is left out
    (``empty_sections`` says why)."""
    out: list[tuple[str, list[str], list[list[str]]]] = []
    costs = cost_columns(report.currency) if report.currency else ()

    def usage_table(key: str, names: Sequence[str], rows: list[Row],
                    columns: Sequence[tuple[str, Callable[[Usage], str]]]) -> None:
        if not rows:
            return
        columns = (*columns, *costs)
        header = ["#", *names, *(name for name, _ in columns)]
        body = [
            [str(i), *(row.labels.get(k, "") or "-" for k in names),
             *(cell(row.usage) for _, cell in columns)]
            for i, row in enumerate(rows, 1)
        ]
        out.append((TITLES[key], header, body))

    usage_table("users", ["user"], report.users, (*USAGE_COLUMNS, ENERGY_COLUMN))
    usage_table("pods", ["namespace", "pod"], report.pods, USAGE_COLUMNS)
    usage_table("jobs", [records.JOB_LABEL, "user"], report.jobs, USAGE_COLUMNS)
    if report.currency:
        usage_table("teams", [records.TEAM_LABEL], report.teams,
                    (USAGE_COLUMNS[0], USAGE_COLUMNS[2], USAGE_COLUMNS[3], ENERGY_COLUMN))
    if report.processes:
        out.append((
            TITLES["processes"],
            ["#", *PROCESS_HEADER],
            [[str(i), *_process_cells(report, p)] for i, p in enumerate(report.processes, 1)],
        ))
    return out


def empty_sections(report: Report) -> list[tuple[str, str]]:
    """(title, why) of each section that has nothing to show, in print order."""
    return [(TITLES[key], report.why_empty[key]) for key in TITLES if key in report.why_empty]


def _cost_line(report: Report) -> str:
    t = report.totals
    if not report.currency:
        return f"Cost: not shown: {report.why_empty.get('cost', 'no prices are set')}"
    c = report.currency
    return (f"Cost: held {_num(t.held_cost, 2)} {c} (used {_num(t.used_cost, 2)}, idle "
            f"{_num(t.idle_cost, 2)}), energy {_num(t.energy_cost, 2)} {c}; total "
            f"{_num(t.total_cost, 2)} {c}")


def _data_line(report: Report) -> str:
    cover = report.coverage
    asked = report.end - report.start
    if cover.first is None or cover.last is None:
        return f"Data: none found in the {format_duration(asked)} range"
    share = min(1.0, cover.seconds / asked) if asked else 0.0
    return (f"Data: {format_duration(cover.seconds)} of the {format_duration(asked)} range "
            f"({share:.0%}), from {iso(cover.first)} to {iso(cover.last)}")


def summary_lines(report: Report) -> list[str]:
    """The heading lines: range, how much of it has data, source, totals, cost."""
    t = report.totals
    energy = "" if t.energy_joules is None else f", energy {t.energy_joules / KWH:,.2f} kWh"
    return [
        f"GPU idle report {iso(report.start)} to {iso(report.end)} "
        f"({format_duration(report.end - report.start)} requested)",
        _data_line(report),
        f"Prometheus {report.prometheus_url}"
        + (f", series matching {{{report.matchers}}}" if report.matchers else ""),
        f"Held {t.held_gpu_seconds / HOUR:,.1f} GPU-h, used {t.used_gpu_seconds / HOUR:,.1f} "
        f"GPU-h ({_pct(t.used_ratio)}); idle {t.idle_gpu_seconds / HOUR:,.1f} GPU-h and "
        f"{t.idle_byte_seconds / GIB / HOUR:,.1f} GiB-h{energy}",
        _cost_line(report),
        *report.notes,
    ]


def explanation() -> list[str]:
    """How to read the figures (the footnote of every format)."""
    displays = ", ".join(list(holders.DISPLAY_PROCESSES)[:4])
    floor = holders.MIN_FORGOTTEN_BYTES / GIB
    return [
        f"Idle: SM utilisation under {thresholds.IDLE_UTILIZATION_RATIO:.0%} at a collection. "
        "GPU-h held idle: a GPU idling while processes hold it, split by memory held.",
        "Per user, pod, job and team: what the exporter integrated at each collection since it "
        "started, within the range's data. Forgotten processes: one process's memory times its "
        "longest idle stretch, from its last kernel (or its start) but never before the range's "
        "data begins; a process started before the exporter counts in its user's figures only "
        "from the exporter's start, and a process whose memory grew shows more than it held on "
        "average.",
        f"Never listed as forgotten: display servers and compositors ({displays}, ...) and "
        f"processes under {floor:g} GiB; their memory still counts for their user.",
        "Cost: held includes used and idle; total = held + energy (docs/cost.md).",
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
    for title, why in empty_sections(report):
        lines += ["", title, f"  none: {why}"]
    lines += ["", *explanation()]
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
    for title, why in empty_sections(report):
        lines += ["", f"## {title}", "", f"None: {_md_cell(why)}."]
    lines += ["", *(f"{line}  " for line in explanation())]
    return "\n".join(lines) + "\n"


CSV_COLUMNS = ["section", "user", "namespace", "pod", records.JOB_LABEL, records.TEAM_LABEL,
               "instance", "gpu", "pid", "process", "idle_gpu_hours", "idle_gib_hours",
               "held_gpu_hours", "held_gib_hours", "used_gpu_hours", "energy_kwh",
               "held_cost", "used_cost", "idle_cost", "energy_cost", "total_cost", "currency",
               "idle_hours", "peak_idle_gib", "started_unix", "last_active_unix",
               "running_at_end", "note"]


def _money(value: float | None) -> Any:
    return "" if value is None else round(value, 6)


def _usage_csv(u: Usage) -> dict[str, Any]:
    return {
        "held_cost": _money(u.held_cost), "used_cost": _money(u.used_cost),
        "idle_cost": _money(u.idle_cost), "energy_cost": _money(u.energy_cost),
        "total_cost": _money(u.total_cost),
        "idle_gpu_hours": round(u.idle_gpu_seconds / HOUR, 6),
        "idle_gib_hours": round(u.idle_byte_seconds / GIB / HOUR, 6),
        "held_gpu_hours": round(u.held_gpu_seconds / HOUR, 6),
        "held_gib_hours": round(u.held_byte_seconds / GIB / HOUR, 6),
        "used_gpu_hours": round(u.used_gpu_seconds / HOUR, 6),
        "energy_kwh": "" if u.energy_joules is None else round(u.energy_joules / KWH, 6),
    }


def csv_text(report: Report) -> str:
    """One CSV table: a ``section`` column (total, user, pod, job, team, process, empty,
    note), hours, kWh and amounts (their ``currency`` on every row that has one)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, CSV_COLUMNS, restval="", extrasaction="ignore",
                            lineterminator="\n")
    writer.writeheader()
    currency = {"currency": report.currency} if report.currency else {}
    writer.writerow({"section": "total", **_usage_csv(report.totals), **currency})
    for section, rows in (("user", report.users), ("pod", report.pods), ("job", report.jobs),
                          ("team", report.teams)):
        for row in rows:
            writer.writerow({"section": section, **row.labels, **_usage_csv(row.usage),
                             **currency})
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
    for title, why in empty_sections(report):
        writer.writerow({"section": "empty", "note": f"{title}: none: {why}"})
    for note in (*report.notes, _data_line(report), *explanation()):
        writer.writerow({"section": "note", "note": note})
    return buffer.getvalue()


def json_text(report: Report) -> str:
    """The whole report in base units (seconds, bytes, joules), for scripts."""
    doc = asdict(report)
    doc["totals"]["used_ratio"] = report.totals.used_ratio
    doc["totals"]["total_cost"] = report.totals.total_cost
    doc["explanation"] = explanation()
    # Strict JSON: the model holds finite numbers only (collect.Usable); allow_nan=False
    # makes a slip an error here rather than a bare NaN a parser chokes on.
    return json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"
