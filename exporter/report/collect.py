"""Ask Prometheus for the idle-accounting records over a range and rank the results.

Per day of the range and per level (user, namespace/pod, job, team), one instant query sums
every recorded quantity over that day (``sum_over_time`` of 1-minute records: about 1,440
samples a series), the cost records too where the site set prices (with their ``currency``
label), so a week costs 28 small queries and a progress line can count them. The user query
also counts the minutes of the day that have data (an exporter's ``gpu_exporter_build_info``,
or an accounting record), so that the report says how much of the range it rests on. The day
windows are ``(day start, day end]`` (the window is one millisecond short of a day), so a
sample on a boundary is counted once. The forgotten processes come from the exporter's
per-process series (``records.idle_since``): one query ranks each process's longest idle
stretch within the range's data, sampled every ``forgotten_step`` seconds (display servers and
processes under the idle floor left out: ``exporter.catalogue.holders``), and one reads the
details of the ranked ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from exporter.catalogue import holders, metrics, records, thresholds
from exporter.report.client import PrometheusClient, ReportError, Sample
from exporter.report.model import Coverage, Day, ProcessRow, Report, Row, Usage
from exporter.report.timerange import TimeRange, chunks, format_duration, iso

__all__ = ["MAX_VALUE", "Progress", "Usable", "build_report"]

#: ``progress(done, total)`` after each query.
Progress = Callable[[int, int], None]
#: Record quantity -> the ``Usage`` field its range total goes to.
FIELDS = {
    records.IDLE_GPUS: "idle_gpu_seconds",
    records.IDLE_MEMORY: "idle_byte_seconds",
    records.HELD_GPUS: "held_gpu_seconds",
    records.HELD_MEMORY: "held_byte_seconds",
    records.USED_GPUS: "used_gpu_seconds",
    records.POWER: "energy_joules",
    records.HELD_COST: "held_cost",
    records.USED_COST: "used_cost",
    records.IDLE_COST: "idle_cost",
    records.ENERGY_COST: "energy_cost",
}
#: Fields holding an amount of money (None where no price is set).
COST_FIELDS = ("held_cost", "used_cost", "idle_cost", "energy_cost")
#: The levels queried per day: user, namespace/pod, job, and team (with a team mapping).
LEVELS = records.COST_LEVELS
#: The coverage figures of a day, tagged in the user query: minutes with data, first, last.
COVERAGE_TAGS = ("minutes", "first", "last")
_TAG = "__report_field"
#: Largest total a report quantity can reach (byte-seconds of 10,000 GPUs of 80 GB held
#: for a year are ~3e22): beyond it a value is an error in the data, not a total.
MAX_VALUE = 1e24
#: Samples of each process's idle stretch over the range (at most one a minute): the ranking
#: query reads every process series at that many instants.
FORGOTTEN_SAMPLES = 250


class Usable:
    """The one check of the values Prometheus returns: what the report may add up or print.

    Totals must be finite, not negative and at most ``MAX_VALUE``; times must lie between
    the epoch and a day past the range. The rest (NaN, infinities, negative or absurd
    numbers from a broken rule or a backfill) are left out and counted, and the report
    carries a note saying so (text, Markdown, HTML and CSV print it; JSON has ``notes``).
    """

    def __init__(self, span: TimeRange) -> None:
        self.latest = span.end + 86400.0
        self.left_out: dict[str, int] = {}

    def total(self, value: float, what: str) -> float | None:
        """``value`` if it can be a total of ``what``, else None (counted)."""
        return self._within(value, MAX_VALUE, what)

    def time(self, value: float, what: str) -> float | None:
        """``value`` if it can be a Unix time within the range's reach, else None (counted)."""
        return self._within(value, self.latest, what)

    def _within(self, value: float, largest: float, what: str) -> float | None:
        if math.isfinite(value) and 0 <= value <= largest:
            return value
        self.left_out[what] = self.left_out.get(what, 0) + 1
        return None

    def notes(self) -> list[str]:
        """One line about what was left out (none when nothing was)."""
        if not self.left_out:
            return []
        count = sum(self.left_out.values())
        kinds = ", ".join(f"{n} {what}" for what, n in sorted(self.left_out.items()))
        return [f"note: {count} value{'s' if count > 1 else ''} from Prometheus left out "
                f"(NaN, infinite, negative or over {MAX_VALUE:g}): {kinds}"]


def _window(span: TimeRange) -> str:
    """A range selector covering ``(start, end]`` when evaluated at ``end``."""
    return f"[{round(span.seconds * 1000) - 1}ms]"


def _tagged(expr: str, tag: str) -> str:
    return f'label_replace({expr}, "{_TAG}", "{tag}", "", "")'


def _present(matchers: str) -> str:
    """1 at an instant where Prometheus holds data: an exporter's build info, or (with
    matchers an exporter's own series lack) an accounting record."""
    build = records.selector(metrics.BUILD_INFO.name, matchers)
    recorded = records.selector(records.USER.record(records.HELD_MEMORY), matchers)
    return f"(count({build}) or count({recorded}))"


def _coverage_parts(span: TimeRange, matchers: str) -> list[str]:
    """The minutes of ``span`` with data, the first and the last (one sample a minute)."""
    minutes = f"{_window(span)[:-1]}:60s]"
    present = _present(matchers)
    return [_tagged(f"count_over_time({present}{minutes})", "minutes"),
            _tagged(f"min_over_time(timestamp({present}){minutes})", "first"),
            _tagged(f"max_over_time(timestamp({present}){minutes})", "last")]


def level_query(level: records.Level, span: TimeRange, matchers: str) -> str:
    """One query for every quantity of ``level`` summed over ``span`` (costs by currency);
    at the user level, the coverage of ``span`` too."""
    by = ", ".join(level.keeps)
    parts = []
    for quantity in records.report_quantities(level):
        keep = (f"{by}, {records.CURRENCY_LABEL}" if quantity in records.COST_QUANTITIES
                else by)
        parts.append(_tagged(f"sum by ({keep}) (sum_over_time("
                             f"{records.selector(level.record(quantity), matchers)}"
                             f"{_window(span)}))", quantity))
    if level is records.USER:
        parts += _coverage_parts(span, matchers)
    return "\nor ".join(parts)


def forgotten_step(span: TimeRange) -> int:
    """Seconds between the samples of idle stretches (``FORGOTTEN_SAMPLES`` over the range)."""
    return max(60, round(span.seconds / FORGOTTEN_SAMPLES))


def _idle_for(span: TimeRange, matchers: str) -> str:
    """Per process: how long it has idled within the range's data (from when its kernels last
    ran, or its start, or the start of the range's data, whichever is latest), where over the
    minimum."""
    return (f"(time() - clamp_min({records.idle_since(matchers)}, {span.start:.3f}) "
            f"> {thresholds.FORGOTTEN_MIN_IDLE_SECONDS})")


def _listed(matchers: str) -> str:
    """``matchers`` leaving out the processes never listed as forgotten (display servers)."""
    return ", ".join(m for m in (matchers, holders.display_matcher()) if m)


def _samples(span: TimeRange) -> str:
    """The subquery range ``[range:step]`` sampling idle stretches over the range."""
    return f"{_window(span)[:-1]}:{forgotten_step(span)}s]"


def forgotten_query(span: TimeRange, matchers: str, top: int) -> str:
    """The ``top`` processes by memory held through one idle stretch within the range (memory
    x stretch, largest sample). The one query that reads every process series of the range,
    at ``FORGOTTEN_SAMPLES`` instants."""
    memory = records.selector(metrics.PROCESS_MEMORY.name, _listed(matchers))
    floor = f"{holders.MIN_FORGOTTEN_BYTES:.0f}"
    return (f"topk({top}, max_over_time((({memory} > {floor}) * {_idle_for(span, matchers)})"
            f"{_samples(span)}))")


def details_query(span: TimeRange, matchers: str) -> str:
    """Longest stretch, most memory, start, last activity and presence at the end of the
    processes ``matchers`` select (the ranked ones: their pids)."""
    window = _window(span)
    memory, started, active = (records.selector(row.name, matchers) for row in (
        metrics.PROCESS_MEMORY, metrics.PROCESS_START_TIME, metrics.PROCESS_LAST_ACTIVE))
    parts = {
        "count": f"max_over_time({_idle_for(span, matchers)}{_samples(span)})",
        "max": f"max_over_time({memory}{window})",
        "start": f"last_over_time({started}{window})",
        "active": f"last_over_time({active}{window})",
        "running": memory,
    }
    return "\nor ".join(_tagged(f"({expr})", tag) for tag, expr in parts.items())


def _split(sample: Sample) -> tuple[str, tuple[tuple[str, str], ...]]:
    labels = dict(sample.labels)
    tag = labels.pop(_TAG, "")
    labels.pop("__name__", None)
    return tag, tuple(sorted(labels.items()))


def _currency(key: tuple[tuple[str, str], ...]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A cost sample's currency, and its key without it."""
    labels = dict(key)
    return labels.pop(records.CURRENCY_LABEL, ""), tuple(labels.items())


def rule_interval(client: PrometheusClient) -> float | None:
    """The accounting group's interval as loaded in Prometheus (None if it is not loaded)."""
    for group in client.rule_groups():
        if group.name == records.GROUP:
            return group.interval_seconds or float(records.INTERVAL_SECONDS)
    return None


def _explain_empty(client: PrometheusClient, span: TimeRange, matchers: str,
                   loaded: bool) -> ReportError:
    probe = records.selector(records.USER.record(records.HELD_MEMORY), matchers)
    if client.series_exist(probe):
        return ReportError(
            f"empty range: no idle-accounting data between {iso(span.start)} and "
            f"{iso(span.end)} (this Prometheus has {probe} at other times)")
    if loaded:
        return ReportError(
            f"empty range: the {records.GROUP} rules are loaded but recorded nothing before "
            f"{iso(span.end)}; they need GPU processes scraped (and a minute) to record")
    return ReportError(
        "missing recording rules: no series named "
        f"{records.USER.record(records.HELD_MEMORY)} and no {records.GROUP} rule group on this "
        f"Prometheus; load dashboards/rules/{records.RULE_FILE} "
        "(docs: README, 'Idle accounting')")


def _cover(coverage: Coverage, tag: str, value: float, usable: Usable) -> None:
    """Add one day's coverage figure."""
    if tag == "minutes":
        coverage.seconds += (usable.total(value, "minutes with data") or 0.0) * 60
        return
    at = usable.time(value, "times with data")
    if at is None:
        return
    if tag == "first":
        coverage.first = at if coverage.first is None else min(coverage.first, at)
    else:
        coverage.last = at if coverage.last is None else max(coverage.last, at)


def _drop_costs(report: Report, currencies: set[str]) -> None:
    """Costs in several currencies cannot be added up: leave them out, with a note."""
    for usage in (report.totals, *(row.usage for rows in (report.users, report.pods,
                                                          report.jobs, report.teams)
                                   for row in rows), *(day.usage for day in report.days)):
        for name in COST_FIELDS:
            setattr(usage, name, None)
    report.currency = None
    names = ", ".join(sorted(currencies))
    report.notes.append(f"note: the cost records carry several currencies ({names}): costs left "
                        "out (one price list per Prometheus, or narrow with --match)")


def _why_empty(report: Report) -> dict[str, str]:
    """Why each empty section is empty, in words."""
    why = {}
    if not report.pods:
        why["pods"] = ("no GPU process ran in a pod within the range (the exporter names pods "
                       "with --kubernetes)")
    if not report.jobs:
        why["jobs"] = ("no GPU process of a Slurm job within the range (the exporter names jobs "
                       "with --slurm)")
    if report.currency is None:
        why["cost"] = ("no prices are set, so there are no cost records (prometheusRule.cost "
                       "in the Helm chart, or cost: in a settings file; docs/cost.md)")
    elif not report.teams:
        why["teams"] = "no team mapping is set (cost.teams; docs/cost.md)"
    if not report.processes:
        data = report.coverage.seconds
        minimum = thresholds.FORGOTTEN_MIN_IDLE_SECONDS
        if data < minimum:
            why["processes"] = (f"the range holds {format_duration(data)} of data, less than "
                                f"the {format_duration(minimum)} a process must idle to be "
                                "listed")
        else:
            why["processes"] = (f"no process holding {holders.MIN_FORGOTTEN_BYTES / 2**30:g} GiB "
                                f"or more idled for {format_duration(minimum)} within the "
                                "range's data (display servers are never listed)")
    return why


def build_report(client: PrometheusClient, span: TimeRange, *, matchers: str = "",
                 top: int = 10, progress: Progress | None = None) -> Report:
    """Query Prometheus and assemble the ranked report.

    Raises:
        ReportError: Prometheus unreachable or erroring, no data in the range, or the
            recording rules missing.
    """
    loaded_interval = rule_interval(client)
    interval = loaded_interval or float(records.INTERVAL_SECONDS)
    report = Report(prometheus_url=client.base, start=span.start, end=span.end,
                    interval_seconds=interval,
                    matchers=matchers)
    usable = Usable(span)
    pieces = chunks(span)
    total = len(pieces) * len(LEVELS) + 1
    done = 0
    tables: dict[str, dict[tuple[tuple[str, str], ...], Usage]] = {
        lv.name: {} for lv in LEVELS
    }
    currencies: set[str] = set()
    for piece in pieces:
        day = Day(piece.start, piece.end)
        for level in LEVELS:
            for sample in client.query(level_query(level, piece, matchers), piece.end):
                quantity, key = _split(sample)
                if quantity in COVERAGE_TAGS:
                    _cover(report.coverage, quantity, sample.value, usable)
                    continue
                if quantity not in FIELDS:
                    continue
                if quantity in records.COST_QUANTITIES:
                    currency, key = _currency(key)
                    currencies.add(currency)
                checked = usable.total(sample.value * interval, quantity)
                if checked is None:
                    continue
                value = checked
                tables[level.name].setdefault(key, Usage()).add(FIELDS[quantity], value)
                if level is records.USER:
                    day.usage.add(FIELDS[quantity], value)
            done += 1
            if progress is not None:
                progress(done, total)
        report.days.append(day)
    if not tables[records.USER.name]:
        raise _explain_empty(client, span, matchers, loaded_interval is not None)

    def ranked(level: records.Level) -> list[Row]:
        rows = [Row(dict(key), usage) for key, usage in tables[level.name].items()]
        rows.sort(key=lambda row: (-row.usage.idle_gpu_seconds, -row.usage.idle_byte_seconds,
                                   -(row.usage.held_cost or 0.0), tuple(row.labels.values())))
        return rows

    report.users, report.pods, report.jobs, report.teams = (ranked(lv) for lv in LEVELS)
    for row in report.users:
        for name in FIELDS.values():
            value = getattr(row.usage, name)
            if value is not None:
                report.totals.add(name, value)
    # n one-minute samples a minute apart span n - 1 minutes.
    report.coverage.seconds = max(0.0, report.coverage.seconds - 60)
    report.currency = next(iter(currencies)) if len(currencies) == 1 else None
    if len(currencies) > 1:
        _drop_costs(report, currencies)
    # Idle stretches count within the range's data only, as the per-user figures do.
    data_start = max(span.start, report.coverage.first or span.start)
    if span.end - data_start > thresholds.FORGOTTEN_MIN_IDLE_SECONDS:
        report.processes = _processes(client, TimeRange(data_start, span.end), matchers, top,
                                      usable)
    report.notes = usable.notes() + report.notes
    report.why_empty = _why_empty(report)
    if progress is not None:
        progress(total, total)
    return report


def _processes(client: PrometheusClient, span: TimeRange, matchers: str,
               top: int, usable: Usable) -> list[ProcessRow]:
    """Rank with one query over every process, then read the details of the ranked ones only
    (selected by pid; the label sets match them exactly)."""
    rows: dict[tuple[tuple[str, str], ...], ProcessRow] = {}
    for sample in client.query(forgotten_query(span, matchers, top), span.end):
        _, key = _split(sample)
        held = usable.total(sample.value, "idle byte-seconds of a process")
        if held:
            rows[key] = ProcessRow(dict(key), idle_byte_seconds=held)
    pids = sorted({row.labels["pid"] for row in rows.values() if "pid" in row.labels})
    if pids:
        selected = ", ".join(m for m in (matchers, f'pid=~"{"|".join(pids)}"') if m)
        for sample in client.query(details_query(span, selected), span.end):
            tag, key = _split(sample)
            row = rows.get(key)
            if row is None:
                continue  # another process with one of these pids
            if tag == "count":
                row.idle_seconds = usable.total(sample.value, "idle seconds") or 0.0
            elif tag == "max":
                row.peak_idle_bytes = usable.total(sample.value, "peak bytes") or 0.0
            elif tag == "start":
                row.started_at = usable.time(sample.value, "start times")
            elif tag == "active":
                row.last_active_at = usable.time(sample.value, "last-active times")
            elif tag == "running":
                row.running_at_end = True
    ranked = sorted(rows.values(), key=lambda row: (-row.idle_byte_seconds,
                                                    tuple(row.labels.items())))
    return ranked[:top]
