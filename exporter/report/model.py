"""What a report holds: plain dataclasses in base units (seconds, bytes, joules; amounts in the
prices' currency)."""

from __future__ import annotations

from dataclasses import dataclass, field

GIB = 1024**3
HOUR = 3600.0


@dataclass(slots=True)
class Usage:
    """Totals over the range for one user, pod or job (or everyone)."""

    idle_gpu_seconds: float = 0.0
    idle_byte_seconds: float = 0.0
    held_gpu_seconds: float = 0.0
    held_byte_seconds: float = 0.0
    used_gpu_seconds: float = 0.0
    energy_joules: float | None = None  # only per user and team (and in the totals)
    # What it cost, where the site set prices (the cost records); None: not priced.
    held_cost: float | None = None
    used_cost: float | None = None
    idle_cost: float | None = None
    energy_cost: float | None = None

    def add(self, quantity: str, value: float) -> None:
        """Add ``value`` (already multiplied by the rule interval) to one quantity."""
        current = getattr(self, quantity)
        setattr(self, quantity, (current or 0.0) + value)

    @property
    def total_cost(self) -> float | None:
        """Held GPU time and energy together (used and idle are parts of held); None without
        any price."""
        if self.held_cost is None and self.energy_cost is None:
            return None
        return (self.held_cost or 0.0) + (self.energy_cost or 0.0)

    @property
    def used_ratio(self) -> float | None:
        """Used GPU time over held GPU time (None when nothing was held)."""
        return self.used_gpu_seconds / self.held_gpu_seconds if self.held_gpu_seconds else None


@dataclass(slots=True)
class Row:
    """One ranked entity: its identifying labels (user; namespace and pod; job and user)."""

    labels: dict[str, str]
    usage: Usage = field(default_factory=Usage)


@dataclass(slots=True)
class ProcessRow:
    """A process that held memory while idle during the range (``collect.forgotten_query``)."""

    labels: dict[str, str]  # instance, gpu, pid, process, user, namespace, pod, ...
    idle_byte_seconds: float = 0.0  # memory held x its idle stretch, largest in the range
    idle_seconds: float = 0.0  # its longest idle stretch within the range
    peak_idle_bytes: float = 0.0  # the most memory it held within the range
    started_at: float | None = None
    last_active_at: float | None = None  # newest kernel seen (needs the exporter's metric)
    running_at_end: bool = False


@dataclass(slots=True)
class Day:
    """One chunk of the range (a day, the last one maybe shorter): every user's usage in it."""

    start: float
    end: float
    usage: Usage = field(default_factory=Usage)


@dataclass(slots=True)
class Coverage:
    """How much of the range has data: the first and last minute in which Prometheus holds an
    exporter's series (or an accounting record), and the time they span in seconds, gaps left
    out (12 minutes with data, one after the other, span 11 minutes)."""

    first: float | None = None
    last: float | None = None
    seconds: float = 0.0


@dataclass(slots=True)
class Report:
    """Everything the formats print."""

    prometheus_url: str
    start: float
    end: float
    interval_seconds: float
    matchers: str = ""
    totals: Usage = field(default_factory=Usage)
    users: list[Row] = field(default_factory=list)
    pods: list[Row] = field(default_factory=list)
    jobs: list[Row] = field(default_factory=list)
    teams: list[Row] = field(default_factory=list)
    processes: list[ProcessRow] = field(default_factory=list)
    days: list[Day] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # values left out, and why
    currency: str | None = None  # the cost records' (None: no prices set)
    coverage: Coverage = field(default_factory=Coverage)
    #: Section key (users, pods, jobs, teams, processes, cost) -> why it is empty.
    why_empty: dict[str, str] = field(default_factory=dict)
