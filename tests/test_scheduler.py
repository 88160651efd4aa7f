"""Scheduler: single flight, min interval, hung collections, init backoff, error counting."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from exporter.catalogue.metrics import Group, default_groups
from exporter.scheduler import Backoff, Scheduler
from exporter.snapshot import Snapshot
from tests.scheduler_fakes import FakeClock, FakeSource

#: Backoff without jitter: retries at exact times.
STEADY = Backoff(jitter=0.0)


def scheduler(source: FakeSource, **kwargs: object) -> Scheduler:
    args: dict[str, object] = {
        "groups": default_groups(), "min_interval": 1.0, "timeout": 2.0, "stale_after": 30.0,
        "backoff": STEADY,
    }
    args.update(kwargs)
    return Scheduler(source, None, **args)  # type: ignore[arg-type]


def test_single_flight_under_concurrent_callers() -> None:
    source = FakeSource(delay=0.3)
    sched = scheduler(source)
    results: list[Snapshot] = []
    lock = threading.Lock()

    def scrape() -> None:
        state = sched.state()
        with lock:
            results.append(state.snapshot)

    threads = [threading.Thread(target=scrape) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert source.collect_calls == 1
    assert len(results) == 16
    assert all(s is results[0] for s in results)
    assert results[0].source_up
    sched.close()


def test_current_is_the_fresh_state_or_none_and_never_collects() -> None:
    clock = FakeClock()
    source = FakeSource()
    sched = scheduler(source, clock=clock, min_interval=1.0)
    assert sched.current() is None  # nothing collected yet
    first = sched.state()
    clock.advance(0.5)
    fresh = sched.current()
    assert fresh is not None
    assert fresh.snapshot is first.snapshot
    assert fresh.data_age_seconds == pytest.approx(0.5)
    clock.advance(0.5)
    assert sched.current() is None  # due for a collection: state() would wait for it
    assert source.collect_calls == 1
    sched.close()


def test_min_interval_reuses_the_snapshot() -> None:
    clock = FakeClock()
    source = FakeSource()
    sched = scheduler(source, clock=clock, min_interval=1.0)
    first = sched.state()
    clock.advance(0.5)
    second = sched.state()
    assert source.collect_calls == 1
    assert second.snapshot is first.snapshot
    assert second.data_age_seconds == pytest.approx(0.5)
    clock.advance(0.5)
    third = sched.state()
    assert source.collect_calls == 2
    assert third.snapshot is not first.snapshot
    assert not third.stale
    sched.close()


def test_zero_min_interval_collects_every_time() -> None:
    source = FakeSource()
    sched = scheduler(source, min_interval=0.0)
    snapshots = {sched.state().snapshot.taken_at for _ in range(5)}
    assert source.collect_calls == 5
    assert len(snapshots) == 5
    sched.close()


def test_hung_collection_serves_stale_data_with_one_thread_then_recovers() -> None:
    source = FakeSource()
    threads_before = set(threading.enumerate())
    # A timeout long enough that "never waits again" (< half of it) holds on a loaded machine.
    sched = scheduler(source, min_interval=0.0, timeout=1.0, stale_after=30.0)
    good = sched.state()
    assert not good.stale
    assert good.snapshot.source_up

    source.gate.clear()  # the next collect() hangs
    begin = time.monotonic()
    hung = sched.state()
    waited = time.monotonic() - begin
    assert 0.95 <= waited < 10
    assert hung.stale
    assert hung.snapshot is good.snapshot
    assert hung.data_age_seconds >= 1.0
    assert hung.errors_total.get("collection_timeout") == 1

    ages = []
    for _ in range(5):  # the overdue collection is not waited for again
        begin = time.monotonic()
        again = sched.state()
        assert time.monotonic() - begin < 0.5
        assert again.stale
        assert again.snapshot is good.snapshot
        ages.append(again.data_age_seconds)
        time.sleep(0.02)
    assert ages == sorted(ages)
    assert ages[-1] > ages[0]
    assert source.collect_calls == 2  # no second collection while one hangs
    new_threads = [t for t in threading.enumerate() if t not in threads_before]
    assert len(new_threads) == 1  # the one collector thread, however many scrapes came
    assert again.errors_total.get("collection_timeout") == 1  # counted once per collection
    assert (sched.stats.in_flight_seconds or 0.0) >= 1.0  # still running

    source.gate.set()  # the hung call returns
    deadline = time.monotonic() + 5
    while sched.stats.in_flight_seconds is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    fresh = sched.state()
    assert not fresh.stale
    assert fresh.snapshot is not good.snapshot
    assert fresh.data_age_seconds < 1.0
    sched.close()


def test_first_collection_hung_serves_a_down_placeholder() -> None:
    source = FakeSource()
    source.gate.clear()
    sched = scheduler(source, timeout=0.1)
    state = sched.state()
    assert state.stale
    assert not state.snapshot.source_up
    assert "no collection has finished" in (state.snapshot.source_error or "")
    assert not sched.ready()
    source.gate.set()
    sched.close()


def test_scrape_timeout_shorter_than_collector_timeout() -> None:
    source = FakeSource()
    sched = scheduler(source, timeout=5.0)
    source.gate.clear()
    begin = time.monotonic()
    state = sched.state(timeout=0.1)
    assert time.monotonic() - begin < 1.0
    assert state.stale
    source.gate.set()
    sched.close()


def test_init_failure_backs_off_then_recovers() -> None:
    clock = FakeClock(0.0)
    source = FakeSource(start_failures=2)
    sched = scheduler(source, clock=clock, min_interval=0.0)

    down = sched.state()
    assert source.start_calls == 1
    assert not down.snapshot.source_up
    assert down.snapshot.source_error == "NVML library not found"
    assert down.errors_total == {"source_init": 1}
    assert not sched.ready()
    assert "NVML library not found" in sched.stats.reason(30.0)

    clock.advance(0.9)
    sched.state()
    assert source.start_calls == 1  # still backing off (1 s)
    clock.advance(0.1)
    sched.state()
    assert source.start_calls == 2  # second failure: next try after 2 s
    clock.advance(1.9)
    still_down = sched.state()
    assert source.start_calls == 2
    assert not still_down.snapshot.source_up
    clock.advance(0.1)
    up = sched.state()
    assert source.start_calls == 3
    assert up.snapshot.source_up
    assert source.collect_calls == 1
    assert up.errors_total == {"source_init": 2}
    assert sched.ready()
    sched.close()


def test_backoff_doubles_to_the_cap_with_jitter_bounds() -> None:
    clock = FakeClock(0.0)
    source = FakeSource(start_failures=100)
    sched = scheduler(
        source, clock=clock, min_interval=0.0,
        # the longest jittered delay: 1.5 x the base
        backoff=Backoff(initial=1.0, maximum=8.0, jitter=0.5, rand=lambda: 1.0),
    )
    delays = []
    for _ in range(6):
        sched.state()
        wait = sched.stats.next_init_in_seconds
        assert wait is not None
        delays.append(wait)
        clock.advance(wait)
    assert delays == pytest.approx([1.5, 3.0, 6.0, 12.0, 12.0, 12.0])
    sched.close()


def test_backoff_spreads_each_wait_both_ways() -> None:
    shortest = Backoff(initial=2.0, maximum=8.0, jitter=0.25, rand=lambda: 0.0)
    assert [shortest.delay(n) for n in (1, 2, 3, 4)] == [1.5, 3.0, 6.0, 6.0]
    assert STEADY.delay(1) == 1.0
    assert STEADY.delay(10_000) == 60.0  # no overflow after days of failures


def test_backoff_survives_days_of_failures() -> None:
    clock = FakeClock(0.0)
    source = FakeSource(start_failures=1_000_000)
    sched = scheduler(source, clock=clock, min_interval=0.0)
    for _ in range(1100):  # ~18 hours of a missing driver: 2 ** 1100 would overflow a float
        sched.state()
        clock.advance(60.0)
    assert source.start_calls == 1100
    assert sched.stats.next_init_in_seconds == pytest.approx(0.0)
    sched.close()


def test_source_lost_during_collect_goes_back_to_init() -> None:
    clock = FakeClock(0.0)
    source = FakeSource()
    sched = scheduler(source, clock=clock, min_interval=0.0)
    assert sched.state().snapshot.source_up
    source.lose_next = True
    lost = sched.state()
    assert not lost.snapshot.source_up
    assert lost.snapshot.source_error == "GPU fell off the bus"
    assert lost.errors_total.get("source_lost") == 1
    assert not sched.ready()
    sched.state()
    assert source.start_calls == 1  # backing off before start() again
    clock.advance(1.0)
    back = sched.state()
    assert source.start_calls == 2
    assert back.snapshot.source_up
    sched.close()


def test_errors_accumulate_into_errors_total() -> None:
    source = FakeSource(errors={"gpu_lost": 1, "garbled_process_entry": 2, "nvml_call": 0})
    sched = scheduler(source, min_interval=0.0)
    for _ in range(3):
        state = sched.state()
    assert state.errors_total == {"gpu_lost": 3, "garbled_process_entry": 6}
    sched.close()


def test_errors_met_outside_collections_are_counted_too() -> None:
    sched = scheduler(FakeSource(errors={"gpu_lost": 1}), min_interval=60.0)
    assert sched.state().errors_total == {"gpu_lost": 1}
    sched.count_errors({"web_config": 1})
    sched.count_errors({"web_config": 1})
    assert sched.state().errors_total == {"gpu_lost": 1, "web_config": 2}  # no new collection
    sched.close()


def test_odd_error_counts_are_ignored() -> None:
    source = FakeSource(errors={"odd": "many", "none": None, "ok": 2})  # type: ignore[dict-item]
    sched = scheduler(source, min_interval=0.0)
    assert sched.state().errors_total == {"ok": 2}
    assert sched.state().snapshot.source_up  # the worker lives on
    sched.close()


def test_unexpected_collect_error_keeps_last_good_data() -> None:
    clock = FakeClock(0.0)
    source = FakeSource()
    sched = scheduler(source, clock=clock, min_interval=0.0, stale_after=10.0)
    good = sched.state()
    source.raise_next = RuntimeError("bug")
    clock.advance(11.0)
    after = sched.state()
    assert after.snapshot is good.snapshot
    assert after.stale  # older than stale_after
    assert after.errors_total.get("collection_failed") == 1
    assert not sched.ready()
    assert sched.state().snapshot.source_up  # and the next collection works again
    assert sched.ready()
    sched.close()


class _Enricher:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls = 0

    def enrich(self, snapshot: Snapshot) -> Snapshot:
        self.calls += 1
        if self.fail:
            raise ValueError("broken passwd")
        return replace(snapshot, hostname="enriched")


def test_enrichment_runs_after_collect_and_failures_are_counted() -> None:
    source = FakeSource()
    good = _Enricher()
    sched = Scheduler(source, good, groups=default_groups(), min_interval=0.0, timeout=1.0,
                      stale_after=30.0)
    assert sched.state().snapshot.hostname == "enriched"
    good.fail = True
    state = sched.state()
    assert state.snapshot.hostname == "host"  # served without enrichment
    assert state.snapshot.source_up
    assert state.errors_total.get("enrichment") == 1
    sched.close()


def test_groups_are_passed_to_collect() -> None:
    source = FakeSource()
    groups = frozenset({Group.ENERGY, Group.MEMORY})
    sched = Scheduler(source, None, groups=groups, min_interval=0.0, timeout=1.0,
                      stale_after=30.0)
    sched.state()
    assert source.groups == [groups]
    sched.close()


def test_ready_goes_false_when_data_ages() -> None:
    clock = FakeClock(0.0)
    source = FakeSource()
    sched = scheduler(source, clock=clock, stale_after=30.0)
    assert not sched.ready()
    sched.state()
    assert sched.ready()
    clock.advance(31.0)
    assert not sched.ready()
    assert "old" in sched.stats.reason(30.0)
    assert sched.await_ready(0.5)  # starts a collection and waits for it
    assert source.collect_calls == 2
    sched.close()


def test_trigger_starts_a_background_collection() -> None:
    source = FakeSource()
    sched = scheduler(source)
    sched.trigger()
    assert source.entered.wait(5)
    deadline = time.monotonic() + 5
    while not sched.ready() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sched.ready()
    sched.state()
    assert source.collect_calls == 1  # the triggered collection is reused
    sched.close()


def test_close_closes_the_source_and_stops_collecting() -> None:
    source = FakeSource()
    sched = scheduler(source, min_interval=0.0)
    sched.state()
    sched.close()
    assert source.closed
    sched.state()
    assert source.collect_calls == 1


def test_close_with_a_hung_collection_leaves_the_source_alone() -> None:
    source = FakeSource()
    source.gate.clear()
    sched = scheduler(source, timeout=0.05)
    sched.state()
    sched.close()
    assert not source.closed  # closing NVML under a hung call is not safe
    source.gate.set()


def test_latest_never_waits_and_says_stale_once_the_collection_is_overdue() -> None:
    source = FakeSource()
    sched = scheduler(source, min_interval=0.0, timeout=1.0)
    assert sched.latest() is None  # nothing collected yet: the caller answers 503
    good = sched.state()
    latest = sched.latest()
    assert latest is not None
    assert latest.snapshot is good.snapshot
    assert not latest.stale
    source.gate.clear()  # the next collection hangs
    source.entered.clear()
    sched.trigger()
    assert source.entered.wait(5)
    begin = time.monotonic()
    during = sched.latest()
    assert time.monotonic() - begin < 0.5  # never waits (a wait would last the timeout)
    assert during is not None
    assert not during.stale  # still within --collector.timeout
    deadline = time.monotonic() + 10
    while not (overdue := sched.latest()) or not overdue.stale:  # once past the timeout
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert overdue is not None
    assert overdue.stale
    assert "collection_timeout" not in overdue.errors_total  # latest() counts nothing
    source.gate.set()
    sched.close()


def test_on_first_snapshot_runs_once_after_the_source_first_answers() -> None:
    clock = FakeClock(0.0)
    source = FakeSource(start_failures=1)
    calls: list[int] = []
    called = threading.Event()

    def first() -> None:
        calls.append(source.collect_calls)
        called.set()
        raise RuntimeError("housekeeping failed")  # must not stop collections

    sched = scheduler(source, clock=clock, min_interval=0.0, on_first_snapshot=first)
    assert not sched.state().snapshot.source_up  # start failed: no snapshot, no call
    assert not called.wait(0.2)
    clock.advance(1.0)
    assert sched.state().snapshot.source_up
    assert called.wait(5)
    for _ in range(3):
        assert sched.state().snapshot.source_up
    assert calls == [1]
    assert source.collect_calls == 4
    sched.close()
