"""``gpu-exporter report``: who held GPUs idle, from the idle-accounting recording rules
(``gpu-exporter report job JOBID`` / ``report pod NAMESPACE/POD``: one workload's summary,
``exporter.report.job_main``).

Exit status: 0 with the report written; 2 with one ``gpu-exporter report: error: ...`` line
for bad flags, an unreachable or refusing Prometheus, an empty range, or missing rules.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from exporter.report.client import PrometheusClient, ReportError
from exporter.report.collect import build_report
from exporter.report.connection_flags import add_connection_flags, connection
from exporter.report.formats import csv_text, json_text, markdown, text
from exporter.report.html import render_html
from exporter.report.model import Report
from exporter.report.timerange import TimeRange, parse_duration

__all__ = ["main"]

PROG = "gpu-exporter report"
#: ``--format`` -> how the report is written.
FORMATS: dict[str, Callable[[Report], str]] = {
    "text": text, "markdown": markdown, "csv": csv_text, "json": json_text, "html": render_html,
}


def build_parser() -> argparse.ArgumentParser:
    """The report's flags."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Idle GPU-hours and GiB-hours per user, namespace/pod and job over a time "
        "range, what they cost (where the site set prices), and the top forgotten processes, "
        "from a Prometheus that runs gpu-exporter's idle-accounting recording rules.",
    )
    add_connection_flags(parser)
    span = parser.add_argument_group("time range")
    span.add_argument("--since", help="the range ending now: 7d, 36h, 1d12h (default 7d)")
    span.add_argument("--start", help="range start: RFC 3339, a date (UTC) or Unix seconds")
    span.add_argument("--end", help="range end (default now)")
    out = parser.add_argument_group("output")
    out.add_argument("--format", choices=sorted(FORMATS), default="text",
                     help="text (a terminal table), markdown, csv, json or html (a "
                     "self-contained page with charts); default %(default)s")
    out.add_argument("--output", "-o", type=Path, help="write here instead of stdout")
    out.add_argument("--top", type=int, default=10,
                     help="how many forgotten processes to list (default %(default)s)")
    out.add_argument("--match", default="",
                     help='label matchers applied to every record, e.g. \'cluster="a"\'')
    progress = out.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None,
                          help="show progress on stderr (default: only when it is a terminal)")
    progress.add_argument("--no-progress", dest="progress", action="store_false")
    return parser


class ProgressLine:
    """``querying Prometheus: 12/22`` on stderr: rewritten in place on a terminal, else a line
    per tenth of the work."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self._last_tenth = -1

    def __call__(self, done: int, total: int) -> None:
        if self.tty:
            end = "\n" if done >= total else ""
            self.stream.write(f"\rquerying Prometheus: {done}/{total}{end}")
        else:
            tenth = done * 10 // max(total, 1)
            if tenth == self._last_tenth:
                return
            self._last_tenth = tenth
            self.stream.write(f"querying Prometheus: {done}/{total}\n")
        self.stream.flush()


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the report; returns the exit status."""
    # Ctrl-C and SIGTERM stop a report at once (the exporter's entry point only records them).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if argv and argv[0] in ("job", "pod"):  # one workload's summary
        from exporter.report.job_main import main as job_main  # noqa: PLC0415

        return job_main(argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        span = TimeRange.resolve(args.since, args.start, args.end)
        timeout = parse_duration(args.timeout)
    except ValueError as exc:
        return _fail(str(exc))
    if args.top < 0:
        return _fail("--top must be 0 or more")
    if "{" in args.match or "}" in args.match:
        return _fail("--match takes matchers without braces, e.g. cluster=\"a\"")
    show = sys.stderr.isatty() if args.progress is None else args.progress
    try:
        client = PrometheusClient(connection(args, float(timeout)))
        report = build_report(client, span, matchers=args.match, top=args.top,
                              progress=ProgressLine(sys.stderr) if show else None)
    except ReportError as exc:
        return _fail(str(exc))
    text = FORMATS[args.format](report)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        args.output.write_text(text, encoding="utf-8")
    except OSError as exc:
        return _fail(f"--output {args.output}: {exc.strerror or exc}")
    return 0
