"""``gpu-exporter report job JOBID`` / ``report pod NAMESPACE/POD``: one workload's summary.

Per node and GPU the workload held: mean utilisation, SM and tensor activity (GPM), peak
memory (the whole GPU's and its processes'), peak PyTorch allocated memory, time held and
held idle, energy, and notes (``exporter.catalogue.job_notes``); what it cost where the site
set prices (``exporter.report.costs``). A job's times, user and GPU
count come from Slurm (``sacct``, else ``scontrol``); ``--start``/``--end`` override them, and
without either the workload's time is searched for in Prometheus within ``--since``.

When Prometheus has no data for the job (retention) or cannot be reached, the summary stored
in the job's AdminComment is printed instead. ``--store`` (the slurmctld epilog,
``slurm/slurmctld-epilog.sh``) stores the summary there in Jobstats' format.

Exit status: 0 with the summary written; 2 with one ``gpu-exporter report: error: ...`` line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from exporter.catalogue import job_notes
from exporter.report.admincomment import SummaryError, decode, encode, encode_b32
from exporter.report.client import PrometheusClient, ReportError
from exporter.report.connection_flags import add_connection_flags, connection
from exporter.report.jobs import (
    FIGURES,
    JobSummary,
    Workload,
    build_summary,
    gpu_totals,
    held_span,
)
from exporter.report.slurm import SlurmError, SlurmJob, job_facts, store_admin_comment
from exporter.report.timerange import TimeRange, format_duration, iso, parse_duration

__all__ = ["FORMATS", "jobstats_text", "json_text", "main", "text"]

PROG = "gpu-exporter report"
GIB = 1024**3
KWH = 3.6e6


def build_parser() -> argparse.ArgumentParser:
    """The flags of a workload's summary."""
    parser = argparse.ArgumentParser(
        prog=f"{PROG} {{job,pod}}",
        description="One Slurm job's (or pod's) GPUs: utilisation, SM and tensor activity, "
        "peak memory, time held idle, energy and notes, from Prometheus (or the summary "
        "stored in the job's AdminComment).",
    )
    parser.add_argument("kind", choices=("job", "pod"))
    parser.add_argument("name", help="the Slurm job id, or namespace/pod")
    add_connection_flags(parser)
    span = parser.add_argument_group("time")
    span.add_argument("--start", help="start (RFC 3339, a UTC date or Unix seconds); default: "
                      "the job's start from Slurm")
    span.add_argument("--end", help="end (default: the job's end, or now while it runs)")
    span.add_argument("--since", default="7d",
                      help="where Slurm does not say (pods), search this far back for when the "
                      "workload held GPUs (default %(default)s)")
    span.add_argument("--step", default="30s",
                      help="sampling step of the figures (default %(default)s: a scrape "
                      "interval or more)")
    out = parser.add_argument_group("output")
    out.add_argument("--format", choices=sorted(FORMATS), default="text",
                     help="text, json, or jobstats (the JS1: string Jobstats stores); "
                     "default %(default)s")
    out.add_argument("--output", "-o", type=Path, help="write here instead of stdout")
    out.add_argument("--match", default="",
                     help='label matchers added to every selector, e.g. \'cluster="a"\'')
    slurm = parser.add_argument_group("Slurm")
    slurm.add_argument("--no-slurm", dest="slurm", action="store_false",
                       help="do not ask Slurm (sacct, scontrol) about the job")
    slurm.add_argument("--store", action="store_true",
                       help="store the summary in the job's AdminComment (sacctmgr; the "
                       "slurmctld epilog does this)")
    return parser


class NoData(ReportError):
    """Prometheus answered, with nothing about the workload, and nothing is stored."""


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def _memory(gpu_figures: dict[str, float]) -> str:
    peak = gpu_figures.get("process_memory_peak_bytes", gpu_figures.get("memory_peak_bytes"))
    total = gpu_figures.get("memory_total_bytes")
    if peak is None:
        return "-"
    return f"{peak / GIB:.1f}" + (f"/{total / GIB:.0f} GiB" if total else " GiB")


def _seconds(value: float | None) -> str:
    return "-" if value is None else format_duration(value)


def _cells(summary: JobSummary) -> list[list[str]]:
    rows = []
    for gpu in summary.gpus:
        f = gpu.figures
        torch = f.get("torch_allocated_peak_bytes")
        energy = f.get("energy_joules")
        rows.append([
            gpu.node, gpu.gpu or gpu.minor_number, gpu.model or "-",
            _seconds(f.get(job_notes.HELD_KEY)), _percent(f.get(job_notes.UTILIZATION_KEY)),
            _percent(f.get(job_notes.SM_ACTIVE_KEY)), _percent(f.get(job_notes.TENSOR_ACTIVE_KEY)),
            _memory(f), "-" if torch is None else f"{torch / GIB:.1f} GiB",
            _seconds(f.get(job_notes.IDLE_KEY)),
            "-" if energy is None else f"{energy / KWH:.2f} kWh",
        ])
    return rows


HEADER = ["node", "gpu", "model", "held", "util", "SM", "tensor", "peak memory",
          "torch peak", "idle", "energy"]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in (header, ["-" * w for w in widths], *rows)]


def _cost_line(summary: JobSummary) -> str:
    """What the workload cost (the cost records), or why no cost is shown."""
    cost = summary.cost
    if cost is None:
        return ("Cost: not shown (no cost records: no prices set, docs/cost.md)"
                if summary.source == "prometheus" else "Cost: not stored with the summary")

    def amount(value: float | None) -> str:
        return "-" if value is None else f"{value:,.2f}"

    return (f"Cost: held {amount(cost.held)} {cost.currency} (used {amount(cost.used)}, idle "
            f"{amount(cost.idle)}), energy {amount(cost.energy)} {cost.currency}; total "
            f"{cost.total:,.2f} {cost.currency}")


def text(summary: JobSummary) -> str:
    """The summary for people: a heading, a table of GPUs, totals, notes."""
    who = ", ".join(p for p in (f"user {summary.user}" if summary.user else "",
                                f"account {summary.account}" if summary.account else "",
                                summary.state) if p)
    lines = [
        f"{summary.title.capitalize()}{f' ({who})' if who else ''}: {iso(summary.start)} to "
        f"{iso(summary.end)} ({format_duration(summary.end - summary.start)}), "
        f"{summary.gpu_count} GPU{'s' if summary.gpu_count != 1 else ''}",
        "From Prometheus" if summary.source == "prometheus"
        else "From the summary stored in the job's AdminComment",
        "",
    ]
    if summary.gpus:
        lines += _table(HEADER, _cells(summary))
        totals = gpu_totals(summary.gpus)
        held, idle = totals.get(job_notes.HELD_KEY, 0.0), totals.get(job_notes.IDLE_KEY)
        parts = [f"held {format_duration(held)} GPU time"]
        if idle is not None and held:
            parts.append(f"idle {format_duration(idle)} ({idle / held:.0%})")
        if "energy_joules" in totals:
            parts.append(f"energy {totals['energy_joules'] / KWH:.2f} kWh")
        lines += ["", "Totals: " + ", ".join(parts)]
        lines.append(_cost_line(summary))
    else:
        lines.append("No GPU data for it.")
    for node, cpu in sorted(summary.cpu.items()):
        usage = (f", CPU time {format_duration(cpu['total_time'])}" if "total_time" in cpu
                 else "")
        memory = (f", memory peak {cpu['used_memory'] / GIB:.1f} of "
                  f"{cpu['total_memory'] / GIB:.1f} GiB"
                  if "used_memory" in cpu and "total_memory" in cpu else "")
        cores = f"{cpu['cpus']:.0f} cores" if "cpus" in cpu else "CPU"
        lines.append(f"CPU on {node}: {cores}{usage}{memory}")
    notes = [f"  {gpu.node} GPU {gpu.gpu or gpu.minor_number}: {note}"
             for gpu in summary.gpus for note in gpu.notes]
    if notes:
        lines += ["", "Notes:", *notes]
    return "\n".join(lines) + "\n"


def json_text(summary: JobSummary) -> str:
    """The summary for tools, in base units, with the figures' meanings and the totals."""
    doc: dict[str, Any] = asdict(summary)
    doc["totals"] = gpu_totals(summary.gpus)
    if summary.cost is not None:
        doc["cost"]["total"] = summary.cost.total
    doc["figures"] = {figure.key: {"title": figure.title, "unit": figure.unit}
                      for figure in FIGURES}
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def jobstats_text(summary: JobSummary) -> str:
    """The ``JS1:`` string Jobstats stores in the AdminComment."""
    return encode(summary) + "\n"


FORMATS: dict[str, Callable[[JobSummary], str]] = {
    "text": text, "json": json_text, "jobstats": jobstats_text,
}


def _span(args: argparse.Namespace, facts: SlurmJob | None, now: float) -> TimeRange | None:
    """The workload's time from the flags or Slurm; None: search Prometheus for it.

    Raises:
        ValueError: unusable flags.
    """
    if args.start is not None:
        return TimeRange.resolve(None, args.start, args.end, now=now)
    if facts is not None and facts.start is not None:
        end = facts.end if facts.end is not None else now
        if args.end is not None:
            end = TimeRange.resolve(None, str(facts.start), args.end, now=now).end
        return TimeRange(facts.start, max(end, facts.start + 1))
    return None


def _stored(facts: SlurmJob | None, workload: Workload) -> JobSummary | None:
    if facts is None or not facts.admin_comment:
        return None
    try:
        return decode(facts.admin_comment, workload.kind, workload.name)
    except SummaryError as exc:
        print(f"{PROG}: warning: job {workload.name}'s AdminComment: {exc}", file=sys.stderr)
        return None


def summarise(args: argparse.Namespace, workload: Workload,
              facts: SlurmJob | None) -> JobSummary:
    """The summary from Prometheus, or the stored one where Prometheus has nothing.

    Raises:
        ReportError: nothing to summarise (the message says why).
        ValueError: unusable flags.
    """
    now = time.time()
    step = float(parse_duration(args.step))
    span = _span(args, facts, now)
    try:
        client = PrometheusClient(connection(args, float(parse_duration(args.timeout))))
        if span is None:
            search = TimeRange.resolve(args.since, None, args.end, now=now)
            span = held_span(client, workload, search, args.match, step)
        summary = None if span is None else build_summary(
            client, workload, span, extra=args.match, step=step,
            user=facts.user if facts else "", state=facts.state if facts else "",
            gpu_count=facts.gpus if facts else None)
    except ReportError as exc:
        stored = _stored(facts, workload)
        if stored is None:
            raise
        print(f"{PROG}: warning: {exc}; printing the stored summary", file=sys.stderr)
        return stored
    if summary is not None and (summary.gpus or summary.cpu):
        summary.account = facts.account if facts else ""
        return summary
    stored = _stored(facts, workload)
    if stored is not None:
        return stored
    where = (f"between {iso(span.start)} and {iso(span.end)}" if span is not None
             else f"in the last {args.since}")
    raise NoData(f"no GPU data for {workload.title} in Prometheus {where}, and no summary "
                 "stored in its AdminComment")


def main(argv: Sequence[str]) -> int:
    """Run a workload's summary; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    if "{" in args.match or "}" in args.match:
        return _fail("--match takes matchers without braces, e.g. cluster=\"a\"")
    try:
        workload = Workload.job(args.name) if args.kind == "job" else Workload.pod(args.name)
        if args.store and args.kind != "job":
            raise ValueError("--store applies to Slurm jobs")
        facts = job_facts(args.name) if args.kind == "job" and args.slurm else None
        summary = summarise(args, workload, facts)
    except NoData as exc:
        if not args.store:
            return _fail(str(exc))
        # Stored as Jobstats stores a job without data (JS1:None): known, not to be retried.
        summary = JobSummary(workload.kind, workload.name, 0.0, 0.0)
    except (ValueError, ReportError) as exc:
        return _fail(str(exc))
    if args.store:
        try:
            stored = store_admin_comment(args.name, encode(summary), encode_b32(summary))
        except SlurmError as exc:
            return _fail(str(exc))
        print(f"stored job {args.name}'s summary in its AdminComment ({stored.split(':')[0]}, "
              f"{len(stored)} characters)", file=sys.stderr)
    output = FORMATS[args.format](summary)
    if args.output is None:
        sys.stdout.write(output)
        return 0
    try:
        args.output.write_text(output, encoding="utf-8")
    except OSError as exc:
        return _fail(f"--output {args.output}: {exc.strerror or exc}")
    return 0

