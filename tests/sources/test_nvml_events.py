"""The XID event waiter against the fake NVML: counting, registration, lost GPUs, shutdown."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from exporter.sources.nvml.events import EventCounts, EventWaiter, XidKey
from tests.sources.fake_nvml_health import FakeHealthNvml, h200_health

WAIT_MS = 50


def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


@pytest.fixture
def fake() -> FakeHealthNvml:
    return FakeHealthNvml([h200_health(0), h200_health(1)])


@pytest.fixture
def waiter(fake: FakeHealthNvml) -> Iterator[EventWaiter]:
    clock = iter(float(t) for t in range(1000, 100000))
    waiter = EventWaiter(fake, wait_ms=WAIT_MS, clock=lambda: next(clock))
    waiter.start()
    yield waiter
    waiter.stop()


def xid_total(counts: EventCounts, index: int, xid: int) -> int:
    return sum(s.count for k, s in counts.gpus[index].xids.items() if k.xid == xid)


def test_counts_xids_by_code_and_gpu_with_last_time(fake: FakeHealthNvml,
                                                    waiter: EventWaiter) -> None:
    assert fake.xid(0, 79) == 1  # one registered set received it
    fake.xid(0, 79)
    fake.xid(0, 13)
    fake.xid(1, 48)
    eventually(lambda: xid_total(waiter.counts(), 0, 79) == 2
               and xid_total(waiter.counts(), 1, 48) == 1
               and xid_total(waiter.counts(), 0, 13) == 1)
    gpu0 = waiter.counts().gpus[0]
    assert gpu0.uuid == fake.gpus[0].uuid
    assert gpu0.registered
    assert set(gpu0.xids) == {XidKey(79), XidKey(13)}
    # The clock is read once per event, in arrival order: the 13 came after both 79s.
    assert gpu0.xids[XidKey(79)].last_seconds < gpu0.xids[XidKey(13)].last_seconds
    assert XidKey(48) not in gpu0.xids


def test_mig_attribution_unknown_xid_and_zero(fake: FakeHealthNvml, waiter: EventWaiter) -> None:
    fake.xid(0, 31, gi=3, ci=0)
    fake.xid(0, 999)  # NVML's code for an XID it cannot name: counted as such
    fake.xid(0, 0)  # not an XID: ignored
    fake.xid(0, 43)  # a later event proves the earlier ones were processed
    eventually(lambda: xid_total(waiter.counts(), 0, 43) == 1)
    xids = waiter.counts().gpus[0].xids
    assert xids[XidKey(31, gpu_instance=3, compute_instance=0)].count == 1
    assert xids[XidKey(999)].count == 1
    assert all(k.xid != 0 for k in xids)


def test_other_health_events_are_counted_by_name(fake: FakeHealthNvml,
                                                 waiter: EventWaiter) -> None:
    fake.emit(1, fake.nvmlEventTypeDoubleBitEccError)
    fake.emit(1, fake.nvmlEventTypeDramRetirementFailure)
    fake.emit(1, fake.nvmlEventTypeDramRetirementFailure)
    eventually(lambda: waiter.counts().gpus[1].events.get("dram_retirement_failure") == 2)
    assert waiter.counts().gpus[1].events == {"double_bit_ecc": 1, "dram_retirement_failure": 2}
    assert not waiter.counts().gpus[0].events


def test_registers_wanted_and_supported_types_only(fake: FakeHealthNvml,
                                                   waiter: EventWaiter) -> None:
    masks = {i: s.registered[i] for s in fake.live_sets() for i in s.registered}
    assert set(masks) == {0, 1}
    for mask in masks.values():
        assert mask & fake.nvmlEventTypeXidCriticalError
        assert mask & fake.nvmlEventMigConfigChange
        # Noise left out: clock and P-state changes, power source, single-bit ECC.
        assert not mask & (fake.nvmlEventTypeClock | fake.nvmlEventTypePState
                           | fake.nvmlEventTypePowerSourceChange
                           | fake.nvmlEventTypeSingleBitEccError)
    # Types not registered are never delivered (NVML semantics in the fake).
    assert fake.emit(0, fake.nvmlEventTypeClock) == 0
    assert "xid" in waiter.counts().gpus[0].watched


def test_one_set_and_one_thread_per_gpu(fake: FakeHealthNvml, waiter: EventWaiter) -> None:
    assert len(fake.live_sets()) == 2
    names = {t.name for t in threading.enumerate()}
    assert {"xid-waiter-0", "xid-waiter-1"} <= names


def test_unsupported_registration_reported_once_and_costs_nothing(
        caplog: pytest.LogCaptureFixture) -> None:
    # GPU 0 supports no event at all; GPU 1 refuses registration (e.g. inside some containers).
    fake = FakeHealthNvml([h200_health(0, supported_events=0), h200_health(1)])
    fake.fail("nvmlDeviceRegisterEvents", 3, gpu=1)
    waiter = EventWaiter(fake, wait_ms=WAIT_MS)
    with caplog.at_level(logging.INFO, logger="exporter.sources.nvml.events"):
        waiter.start()
    try:
        time.sleep(5 * WAIT_MS / 1000)
        before = sum(fake.calls.values())
        time.sleep(5 * WAIT_MS / 1000)
        assert sum(fake.calls.values()) == before  # no thread, no call after the start
        counts = waiter.counts()
        for index in (0, 1):
            assert not counts.gpus[index].registered
            assert counts.gpus[index].error
        assert "not supported" in (counts.gpus[1].error or "")
        assert not any(t.name.startswith("xid-waiter-") for t in threading.enumerate())
        assert not fake.live_sets()  # the set of the refused registration was freed
        reported = [r for r in caplog.records if "not watched" in r.getMessage()]
        assert len(reported) == 2  # once per GPU
    finally:
        waiter.stop()


def test_a_refused_extra_type_does_not_cost_the_xid_events() -> None:
    fake = FakeHealthNvml([h200_health(0, refused_events=0x1000)])  # non-fatal poison refused
    waiter = EventWaiter(fake, wait_ms=WAIT_MS)
    waiter.start()
    try:
        gpu = waiter.counts().gpus[0]
        assert gpu.registered
        assert gpu.watched == ("xid",)
        assert fake.live_sets()[0].registered == {0: fake.nvmlEventTypeXidCriticalError}
        fake.xid(0, 48)
        eventually(lambda: xid_total(waiter.counts(), 0, 48) == 1)
    finally:
        waiter.stop()


def test_lost_gpu_does_not_kill_the_thread_and_others_keep_counting(
        fake: FakeHealthNvml, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("exporter.sources.nvml.events._BACKOFF_FIRST", 0.05)
    waiter = EventWaiter(fake, wait_ms=WAIT_MS)
    waiter.start()
    try:
        fake.lose(0)
        eventually(lambda: not waiter.counts().gpus[0].registered)
        assert "lost" in (waiter.counts().gpus[0].error or "").lower()
        fake.xid(1, 94)  # the healthy GPU still counts
        eventually(lambda: xid_total(waiter.counts(), 1, 94) == 1)
        fake.recover(0)
        eventually(lambda: waiter.counts().gpus[0].registered)  # re-registered after back-off
        assert waiter.counts().gpus[0].error is None
        eventually(lambda: fake.xid(0, 79) == 1)
        eventually(lambda: xid_total(waiter.counts(), 0, 79) == 1)
        assert len(fake.live_sets()) == 2  # the lost GPU's old set was freed, a new one made
    finally:
        waiter.stop()


def test_stop_is_fast_frees_sets_and_gives_nvml_back(fake: FakeHealthNvml) -> None:
    fake.nvmlInit()  # the NVML source's own reference
    waiter = EventWaiter(fake, wait_ms=200)
    waiter.start()
    assert fake.refs == 2
    assert waiter.counts().running
    took = waiter.stop()
    assert took < 5.0  # about one wait timeout (0.2 s); a stop that hung would never return
    assert not fake.live_sets()
    assert fake.event_sets
    assert all(s.freed for s in fake.event_sets)
    assert fake.refs == 1
    assert fake.initialized
    assert not waiter.counts().running
    assert not any(t.name.startswith("xid-waiter-") for t in threading.enumerate())
    assert waiter.stop() == 0.0  # idempotent


def test_source_shutdown_does_not_pull_nvml_from_under_the_waiter(
        fake: FakeHealthNvml, waiter: EventWaiter) -> None:
    fake.nvmlInit()
    fake.nvmlShutdown()  # what NvmlSource.close does
    assert fake.initialized
    fake.xid(0, 62)
    eventually(lambda: xid_total(waiter.counts(), 0, 62) == 1)


def test_hung_wait_bounds_stop_and_frees_nothing_under_it(fake: FakeHealthNvml) -> None:
    waiter = EventWaiter(fake, wait_ms=WAIT_MS)
    waiter.start()
    entered = fake.hang("nvmlEventSetWait", gpu=None)
    try:
        assert entered.wait(5)
        took = waiter.stop(timeout=0.3)
        assert 0.25 < took < 3.0
        assert fake.refs == 1  # NVML not shut down while a wait may still run
    finally:
        fake.release()
    eventually(lambda: not any(t.name.startswith("xid-waiter-")
                               for t in threading.enumerate()))
    assert not fake.live_sets()  # the thread freed its own set once the wait returned


def test_counts_snapshot_is_immutable_and_lock_free(fake: FakeHealthNvml,
                                                   waiter: EventWaiter) -> None:
    before = waiter.counts()
    fake.xid(0, 45)
    eventually(lambda: xid_total(waiter.counts(), 0, 45) == 1)
    assert xid_total(before, 0, 45) == 0  # an old snapshot never changes under a reader
    with pytest.raises(TypeError):
        before.gpus[0].xids[XidKey(1)] = None  # type: ignore[index]


def test_start_fails_cleanly_without_nvml(fake: FakeHealthNvml) -> None:
    fake.fail_init(9, times=None)  # driver not loaded
    waiter = EventWaiter(fake, wait_ms=WAIT_MS)
    with pytest.raises(fake.NVMLError):
        waiter.start()
    assert waiter.stop() == 0.0
    assert not waiter.counts().running


def test_xid_storm_is_counted_exactly(fake: FakeHealthNvml, waiter: EventWaiter) -> None:
    for _ in range(2000):
        fake.xid(0, 31)
    eventually(lambda: xid_total(waiter.counts(), 0, 31) == 2000, timeout=20)


def test_event_labels_are_the_rows_label_values() -> None:
    from exporter.catalogue import metrics  # noqa: PLC0415
    from exporter.sources.nvml.events import HEALTH_EVENTS  # noqa: PLC0415

    assert tuple(HEALTH_EVENTS.values()) == metrics.HEALTH_EVENTS
