"""LastActive: the newest nonzero-SM sample per pid, across collections and restarts."""

from __future__ import annotations

import types

import pytest

from exporter.sources.nvml.last_active import MICROSECONDS, LastActive, sample_seconds

NOW = 1_764_700_000.0  # 2025-12-02


def sample(pid: int, seconds: float, sm: int) -> types.SimpleNamespace:
    """An NVML process-utilisation sample (timestamp in microseconds since the epoch)."""
    return types.SimpleNamespace(pid=pid, timeStamp=int(seconds * MICROSECONDS), smUtil=sm,
                                 memUtil=0, encUtil=0, decUtil=0)


def test_newest_busy_sample_wins_and_idle_samples_do_not_count() -> None:
    tracker = LastActive()
    got = tracker.update(
        [sample(10, NOW - 30, 80), sample(10, NOW - 5, 40), sample(10, NOW - 1, 0),
         sample(20, NOW - 2, 0)],
        live_pids={10, 20}, now=NOW,
    )
    assert got == {10: NOW - 5}  # pid 20 never ran a kernel: unknown, not "now"


def test_an_idle_process_keeps_its_last_active_time() -> None:
    tracker = LastActive()
    tracker.update([sample(10, NOW - 100, 90)], live_pids={10}, now=NOW - 99)
    # Later collections bring no sample (NVML lists only processes that ran) or smUtil 0.
    assert tracker.update([], live_pids={10}, now=NOW) == {10: NOW - 100}
    assert tracker.update([sample(10, NOW, 0)], live_pids={10}, now=NOW) == {10: NOW - 100}


def test_an_older_sample_never_moves_the_time_back() -> None:
    tracker = LastActive()
    tracker.update([sample(10, NOW - 10, 50)], live_pids={10}, now=NOW)
    assert tracker.update([sample(10, NOW - 50, 50)], live_pids={10}, now=NOW) == {10: NOW - 10}


def test_a_vanished_pid_is_forgotten_so_a_reused_pid_starts_afresh() -> None:
    tracker = LastActive()
    tracker.update([sample(10, NOW - 10, 50)], live_pids={10}, now=NOW)
    assert tracker.update([], live_pids=set(), now=NOW) == {}
    assert tracker.update([], live_pids={10}, now=NOW + 1) == {}


def test_a_restarted_exporter_recovers_what_nvml_still_holds() -> None:
    """The first collection asks with lastSeenTimeStamp 0: NVML's buffer is all there is."""
    buffer = [sample(10, NOW - 20, 70), sample(11, NOW - 3, 10)]
    fresh = LastActive()
    assert fresh.update(buffer, live_pids={10, 11, 12}, now=NOW) == {10: NOW - 20, 11: NOW - 3}


@pytest.mark.parametrize(
    "bad",
    [
        sample(10, NOW + 3600, 50),  # from the future
        sample(10, 5, 50),  # 1970
        types.SimpleNamespace(pid=10, timeStamp="x", smUtil=50),
        types.SimpleNamespace(pid=10, smUtil=50),
        types.SimpleNamespace(pid="?", timeStamp=int(NOW * MICROSECONDS), smUtil=50),
    ],
)
def test_implausible_samples_are_ignored(bad: object) -> None:
    tracker = LastActive()
    assert tracker.update([bad, sample(11, NOW - 1, 5)], live_pids={10, 11}, now=NOW) == {
        11: NOW - 1
    }


def test_sample_seconds_converts_microseconds() -> None:
    assert sample_seconds(sample(1, NOW - 0.25, 1), NOW) == pytest.approx(NOW - 0.25)
    assert sample_seconds(sample(1, NOW, 0), NOW) is None
