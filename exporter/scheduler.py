"""When to collect: single flight, minimum interval, bounded waits, stale data, init backoff.

Collection is scrape-driven. ``Scheduler.state()`` serves the latest snapshot if it is younger
than ``min_interval``; otherwise it asks the one worker thread for a collection (or joins the
one already in flight) and waits at most ``timeout``. A collection that overruns (a hung NVML
call) keeps the worker busy, so no second collection starts and no threads pile up; scrapes
meanwhile get the last good snapshot marked stale with its growing age.

The worker also initialises the source: ``start()`` is retried with exponential backoff
(jittered) until it succeeds, and a ``SourceUnavailable`` from ``collect()`` sends it back to
initialisation. Until then scrapes get a ``source_up=False`` snapshot saying why.

A source that reads GPUs on their own threads (the NVML source) says which GPUs have a read
hung (``hung_gpus``): it answers those GPUs ``up=False`` itself, and when its collection
overruns (with one GPU it reads inline) the scheduler marks the hung GPUs down in the stale
snapshot it serves, so a hung GPU never shows ``gpu_up 1``. ``/readyz`` lists hung GPUs and
fails only when every GPU is hung.

Times for ages, intervals and backoff come from the injected ``clock`` (monotonic seconds);
waits use real time, so a test with a frozen fake clock must not leave a collection hanging.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

from exporter.attribution.enrich import Enricher
from exporter.catalogue.metrics import Group
from exporter.snapshot import GpuReading, Snapshot
from exporter.sources.base import Source, SourceUnavailable
from exporter.state import ExporterState

__all__ = ["Backoff", "Scheduler", "SchedulerStats"]

log = logging.getLogger(__name__)

# Keys of ``errors_total`` the scheduler itself counts (sources and enrichers add their own).
TIMEOUT_ERROR = "collection_timeout"
INIT_ERROR = "source_init"
LOST_ERROR = "source_lost"
FAILED_ERROR = "collection_failed"
ENRICH_ERROR = "enrichment"


@runtime_checkable
class ReportsHungGpus(Protocol):
    """A source that can tell which GPUs have a read hung, and for how long."""

    def hung_gpus(self) -> Mapping[int, float]:
        """GPU index -> seconds its current read has run past the source's per-GPU limit."""
        ...


def hung_reading(reading: GpuReading, seconds: float) -> GpuReading:
    """``reading`` as served while its GPU's NVML call has not returned for ``seconds``."""
    return GpuReading(identity=reading.identity, up=False,
                      error=f"NVML call has not returned for {seconds:.1f}s")


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    """What ``/readyz`` reports about the scheduler."""

    initialised: bool
    source_error: str | None
    in_flight_seconds: float | None  # None when no collection is running
    collections: int  # finished collection attempts (init failures included)
    last_duration_seconds: float | None
    data_age_seconds: float | None  # age of the last good data; None before the first
    next_init_in_seconds: float | None  # while initialisation is backing off
    hung_gpus: Mapping[int, float] = field(default_factory=dict)  # index -> seconds
    gpu_count: int = 0  # GPUs in the last snapshot

    @property
    def all_gpus_hung(self) -> bool:
        return self.gpu_count > 0 and len(self.hung_gpus) >= self.gpu_count

    def reason(self, stale_after: float) -> str:
        """One sentence on why the scheduler is not ready (or "ready")."""
        if self.all_gpus_hung:
            gpus = ", ".join(f"GPU {i} for {s:.1f}s" for i, s in sorted(self.hung_gpus.items()))
            return f"every GPU's NVML calls are hung: {gpus}"
        if not self.initialised:
            wait = self.next_init_in_seconds
            retry = f"; next attempt in {wait:.1f}s" if wait else ""
            return f"source not initialised: {self.source_error or 'not started yet'}{retry}"
        if self.data_age_seconds is None:
            return "no collection has finished yet"
        if self.data_age_seconds > stale_after:
            hung = self.in_flight_seconds
            note = f"; a collection has been running for {hung:.1f}s" if hung else ""
            return f"data is {self.data_age_seconds:.1f}s old (limit {stale_after:g}s){note}"
        return "ready"


@dataclass(frozen=True, slots=True)
class Backoff:
    """The waits between attempts to initialise the source: doubling from ``initial`` up to
    ``maximum``, each spread by up to ``jitter`` of itself either way (``rand``: uniform in
    [0, 1)) so that exporters restarted together do not retry in step."""

    initial: float = 1.0
    maximum: float = 60.0
    jitter: float = 0.1
    rand: Callable[[], float] = random.random

    def delay(self, failures: int) -> float:
        """The wait after ``failures`` (1 or more) failed attempts in a row."""
        doublings = min(failures - 1, 40)  # capped: 2.0 ** 1024 overflows
        base = min(self.maximum, self.initial * 2.0**doublings)
        return base * (1.0 + self.jitter * (2.0 * self.rand() - 1.0))


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What one worker run produced (applied under the lock)."""

    started: float  # clock() at start
    started_wall: float
    finished: float
    snapshot: Snapshot | None = None  # a collection that returned
    init_error: str | None = None  # start() failed
    lost_error: str | None = None  # collect() raised SourceUnavailable
    failed: bool = False  # collect() raised something unexpected
    errors: Mapping[str, int] | None = None


class Scheduler:
    """Serves ``ExporterState`` to scrapes; owns the one collector thread."""

    def __init__(
        self,
        source: Source,
        enricher: Enricher | None,
        *,
        groups: frozenset[Group],
        min_interval: float,
        timeout: float,
        stale_after: float,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        backoff: Backoff = Backoff(),
        on_first_snapshot: Callable[[], object] | None = None,
    ) -> None:
        self._source = source
        self._enricher = enricher
        self._groups = groups
        self._min_interval = min_interval
        self.timeout = self._timeout = timeout  # public copies are read-only by convention
        self.stale_after = self._stale_after = stale_after
        self._clock = clock
        self._wall = wall
        self._backoff = backoff
        self._on_first_snapshot = on_first_snapshot  # called once, in the collector thread
        self._hostname = socket.gethostname()

        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)  # a collection attempt finished
        self._wake = threading.Condition(self._lock)  # the worker has something to do
        self._worker: threading.Thread | None = None
        self._requested = False
        self._closed = False
        self._in_flight_since: float | None = None
        self._timeout_counted = False
        self._generation = 0
        self._created = clock()
        self._created_wall = wall()  # what the error counters count from

        self._initialised = False
        self._init_failures = 0
        self._next_init_at = self._created
        self._source_error: str | None = None

        self._latest: Snapshot | None = None
        self._latest_at: float | None = None
        self._good_at: float | None = None
        self._last_duration: float | None = None
        self._last_success_ts: float | None = None
        self._errors: dict[str, int] = {}
        self._web_config_ok: bool | None = None

    # --- what scrapes call ---------------------------------------------------------------

    def state(self, timeout: float | None = None) -> ExporterState:
        """The state to serve now; blocks at most ``min(timeout, self.timeout)`` seconds.

        Never raises for source problems: they show up in the returned snapshot and counters.
        """
        limit = self._timeout if timeout is None else max(0.0, min(timeout, self._timeout))
        with self._lock:
            now = self._clock()
            if self._fresh(now) or self._closed:
                return self._build(now, timed_out=False)
            if self._in_flight_since is None:
                if not self._initialised and now < self._next_init_at:
                    return self._build(now, timed_out=False)  # backing off: serve "down"
                self._request(now)
            assert self._in_flight_since is not None
            generation = self._generation
            # An overdue collection is not waited for again: later scrapes answer at once.
            deadline = min(now + limit, self._in_flight_since + self._timeout)
            while self._generation == generation:
                remaining = deadline - self._clock()
                if remaining <= 0:
                    break
                self._done.wait(remaining)
            now = self._clock()
            if self._generation != generation:
                return self._build(now, timed_out=False)
            self._count_overrun(now)
            return self._build(now, timed_out=True)

    def current(self) -> ExporterState | None:
        """What ``state()`` would return at once (the data is fresh), else None; never waits.

        A scrape of fresh data needs no thread to wait in (``exporter/web/app.py``).
        """
        with self._lock:
            now = self._clock()
            if self._fresh(now) or self._closed:
                return self._build(now, timed_out=False)
            return None

    def latest(self) -> ExporterState | None:
        """The last collected state at once (None before any): never starts or waits.

        For scrapes beyond ``--web.max-requests``: they get what the waiting ones will get
        at most one collection later, instead of a 503.
        """
        with self._lock:
            if self._latest is None:
                return None
            now = self._clock()
            since = self._in_flight_since
            # Stale, as state() would say, once the running collection is past the timeout.
            return self._build(now, timed_out=since is not None and now - since >= self._timeout)

    def trigger(self) -> None:
        """Start a collection in the background if one is due (never blocks)."""
        with self._lock:
            now = self._clock()
            if self._closed or self._in_flight_since is not None or self._fresh(now):
                return
            if self._initialised or now >= self._next_init_at:
                self._request(now)

    def count_errors(self, errors: Mapping[str, int]) -> None:
        """Count problems met outside collections (a web config that failed to reload) in
        ``errors_total``, by kind."""
        with self._lock:
            self._count(errors)

    def record_web_config_reload(self, successful: bool) -> None:
        """The outcome of the last web config (re)load, served from now on."""
        with self._lock:
            self._web_config_ok = successful

    def await_ready(self, timeout: float) -> bool:
        """Start a collection if one is due, then wait up to ``timeout`` for ``ready()``.

        For readiness probes: unlike ``state()`` it never counts a timeout as an error.
        """
        self.trigger()
        deadline = self._clock() + timeout
        with self._lock:
            while not self._ready_locked():
                remaining = deadline - self._clock()
                if remaining <= 0 or self._in_flight_since is None:
                    break
                self._done.wait(remaining)
            return self._ready_locked()

    def ready(self) -> bool:
        """True when the source is initialised and the last good data is within stale_after."""
        with self._lock:
            return self._ready_locked()

    @property
    def stats(self) -> SchedulerStats:
        """A consistent view of the scheduler's bookkeeping."""
        with self._lock:
            now = self._clock()
            return SchedulerStats(
                initialised=self._initialised,
                source_error=self._source_error,
                in_flight_seconds=None
                if self._in_flight_since is None
                else now - self._in_flight_since,
                collections=self._generation,
                last_duration_seconds=self._last_duration,
                data_age_seconds=None if self._good_at is None else now - self._good_at,
                next_init_in_seconds=None
                if self._initialised
                else max(0.0, self._next_init_at - now),
                hung_gpus=self._hung_gpus(),
                gpu_count=0 if self._latest is None else len(self._latest.gpus),
            )

    def close(self, join_timeout: float = 1.0) -> None:
        """Stop the worker and close the source (skipped if a collection is hung in it)."""
        with self._lock:
            self._closed = True
            self._wake.notify_all()
            worker, busy = self._worker, self._in_flight_since is not None
        if worker is not None and not busy:
            worker.join(join_timeout)
        if busy:
            log.warning("closing while a collection is still running; not closing the source")
            return
        try:
            self._source.close()
        except Exception:  # closing must not turn a clean shutdown into a crash
            log.exception("closing the source failed")

    # --- internals (called with the lock held) -------------------------------------------

    def _count_overrun(self, now: float) -> None:
        """Count a timeout once per collection, and only past the scheduler's own timeout.

        A scrape whose shorter X-Prometheus-Scrape-Timeout-Seconds ran out gets stale data
        but counts nothing: any client can send that header, and must not be able to raise
        errors_total (and so fire the errors alert) with it.
        """
        since = self._in_flight_since
        if self._timeout_counted or since is None or now - since < self._timeout:
            return
        self._timeout_counted = True
        self._count({TIMEOUT_ERROR: 1})
        log.warning("collection still running after %.1fs; serving the last good data",
                    now - since, extra={"source": self._source.name})

    def _ready_locked(self) -> bool:
        good_at = self._good_at
        if not (self._initialised and good_at is not None
                and self._clock() - good_at <= self._stale_after):
            return False
        gpus = 0 if self._latest is None else len(self._latest.gpus)
        return gpus == 0 or len(self._hung_gpus()) < gpus

    def _hung_gpus(self) -> Mapping[int, float]:
        source = self._source
        if not isinstance(source, ReportsHungGpus):
            return {}
        try:
            return dict(source.hung_gpus())
        except Exception:  # diagnostics must never break a scrape
            log.exception("asking the source for hung GPUs failed")
            return {}

    def _fresh(self, now: float) -> bool:
        return self._latest_at is not None and now - self._latest_at < self._min_interval

    def _request(self, now: float) -> None:
        self._in_flight_since = now
        self._timeout_counted = False
        self._requested = True
        if self._worker is None:
            self._worker = threading.Thread(target=self._run, name="collector", daemon=True)
            self._worker.start()
        self._wake.notify()

    def _count(self, errors: Mapping[str, int]) -> None:
        for kind, count in errors.items():
            if isinstance(count, int) and count > 0:  # odd values are not counted
                self._errors[str(kind)] = self._errors.get(str(kind), 0) + count

    def _down_snapshot(self, taken_at: float, error: str) -> Snapshot:
        return Snapshot(source=self._source.name, hostname=self._hostname, taken_at=taken_at,
                        duration_seconds=0.0, source_up=False, source_error=error)

    def _build(self, now: float, *, timed_out: bool) -> ExporterState:
        snapshot = self._latest
        since = self._latest_at if self._latest_at is not None else self._created
        if snapshot is None:
            running = "" if self._in_flight_since is None else " (first collection running)"
            error = self._source_error or f"no collection has finished yet{running}"
            snapshot = self._down_snapshot(self._wall(), error)
        elif self._in_flight_since is not None and now - self._in_flight_since >= self._timeout:
            hung = self._hung_gpus()  # the overdue collection is stuck in these GPUs' reads
            if hung and any(g.identity.index in hung and g.up for g in snapshot.gpus):
                snapshot = replace(snapshot, gpus=tuple(
                    hung_reading(g, hung[g.identity.index]) if g.identity.index in hung else g
                    for g in snapshot.gpus))
        age = max(0.0, now - since)
        return ExporterState(
            snapshot=snapshot,
            data_age_seconds=age,
            stale=timed_out or age > self._stale_after,
            last_success_timestamp=self._last_success_ts,
            errors_total=dict(self._errors),
            web_config_reload_successful=self._web_config_ok,
            counting_since=self._created_wall,
        )

    def _apply(self, out: _Outcome) -> None:
        self._last_duration = out.finished - out.started
        self._count_overrun(out.finished)  # overran with no scrape waiting to see it
        if out.errors:
            self._count(out.errors)
        if out.init_error is not None or out.lost_error is not None:
            lost = out.lost_error is not None
            self._initialised = False
            self._init_failures = 1 if lost else self._init_failures + 1
            delay = self._backoff.delay(self._init_failures)
            self._next_init_at = out.finished + delay
            message = out.lost_error if lost else out.init_error
            assert message is not None
            self._source_error = message
            self._count({LOST_ERROR if lost else INIT_ERROR: 1})
            self._latest = self._down_snapshot(out.started_wall, message)
            self._latest_at = out.started
            log.warning("source %s: %s; retrying in %.1fs", "lost" if lost else "failed to start",
                        message, delay, extra={"source": self._source.name})
        elif out.failed:
            self._initialised = True  # start() succeeded; only collect() broke
            self._count({FAILED_ERROR: 1})
        elif out.snapshot is not None:
            snapshot = out.snapshot
            if not self._initialised or self._init_failures:
                log.info("source %s is up", self._source.name)
            self._initialised = True
            self._init_failures = 0
            self._source_error = None
            self._count(snapshot.errors)
            self._latest = snapshot
            self._latest_at = out.started
            if snapshot.source_up:
                self._good_at = out.started
                if all(g.up for g in snapshot.gpus) and not any(snapshot.errors.values()):
                    self._last_success_ts = out.started_wall

    # --- the worker thread ---------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._requested and not self._closed:
                    self._wake.wait()
                if self._closed:
                    self._in_flight_since = None
                    self._generation += 1  # waiters return instead of timing out
                    self._done.notify_all()
                    return
                self._requested = False
                initialised = self._initialised
            outcome = self._run_once(initialised)
            with self._lock:
                try:
                    self._apply(outcome)
                except Exception:  # odd data (say, a non-numeric error count): keep going
                    log.exception("recording a collection failed")
                finally:
                    self._in_flight_since = None
                    self._generation += 1
                    self._done.notify_all()
            if outcome.snapshot is not None and self._on_first_snapshot is not None:
                callback, self._on_first_snapshot = self._on_first_snapshot, None
                try:
                    callback()
                except Exception:  # start-up housekeeping must not stop collections
                    log.exception("the first-snapshot callback raised")

    def _run_once(self, initialised: bool) -> _Outcome:
        started, started_wall = self._clock(), self._wall()

        def done(
            snapshot: Snapshot | None = None,
            init_error: str | None = None,
            lost_error: str | None = None,
            failed: bool = False,
            errors: Mapping[str, int] | None = None,
        ) -> _Outcome:
            return _Outcome(
                started=started, started_wall=started_wall, finished=self._clock(),
                snapshot=snapshot, init_error=init_error, lost_error=lost_error,
                failed=failed, errors=errors,
            )

        if not initialised:
            try:
                self._source.start()
            except SourceUnavailable as exc:
                return done(init_error=str(exc) or type(exc).__name__)
            except Exception as exc:  # a bug or an odd library error: report, retry later
                log.exception("source start raised unexpectedly")
                return done(init_error=f"{type(exc).__name__}: {exc}")
        try:
            snapshot = self._source.collect(self._groups)
        except SourceUnavailable as exc:
            return done(lost_error=str(exc) or type(exc).__name__)
        except Exception:
            log.exception("collection raised unexpectedly; serving the last good data")
            return done(failed=True)
        if self._enricher is not None:
            try:
                snapshot = self._enricher.enrich(snapshot)
            except Exception:  # un-enriched data beats no data
                log.exception("enrichment failed; serving the snapshot without it")
                return done(snapshot=snapshot, errors={ENRICH_ERROR: 1})
        return done(snapshot=snapshot)
