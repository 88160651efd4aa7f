"""Per-GPU reader threads: overlap, bounded waits, one outstanding call per GPU, recovery."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from exporter.sources.nvml.workers import Done, Failed, GpuWorkers, Hung

_EARLIER: set[threading.Thread] = set()


def reader_threads() -> list[threading.Thread]:
    """Reader threads started by this test (other tests' idle sources may have their own)."""
    return [t for t in threading.enumerate() if t.name.endswith("-reader") and t not in _EARLIER]


@pytest.fixture(autouse=True)
def _note_earlier_threads() -> None:
    _EARLIER.clear()
    _EARLIER.update(threading.enumerate())


@pytest.fixture
def workers() -> GpuWorkers[str]:
    # A timeout long enough that "answered at once" (< half of it) holds on a loaded machine.
    pool: GpuWorkers[str] = GpuWorkers(timeout=1.0)
    yield pool  # type: ignore[misc]
    pool.close()


def test_one_gpu_is_read_inline_without_a_thread_hop(workers: GpuWorkers[str]) -> None:
    caller = threading.current_thread()
    seen: list[threading.Thread] = []

    def read() -> str:
        seen.append(threading.current_thread())
        assert workers.busy().keys() == {0}  # an inline read is visible while it runs
        return "gpu0"

    assert workers.run({0: read}) == {0: Done("gpu0")}
    assert seen == [caller]
    assert workers.busy() == {}
    assert reader_threads() == []


def test_reads_of_different_gpus_overlap(workers: GpuWorkers[str]) -> None:
    together = threading.Barrier(8, timeout=0.9)  # passed only if all 8 run at once

    def read(index: int) -> Callable[[], str]:
        def meet() -> str:
            together.wait()  # blocks, releasing the GIL, as a ctypes NVML call does
            return f"gpu{index}"
        return meet

    results = workers.run({i: read(i) for i in range(8)})
    assert results == {i: Done(f"gpu{i}") for i in range(8)}, "the reads did not overlap"
    assert list(results) == list(range(8))  # GPU order kept


def test_an_exception_is_handed_back_for_that_gpu_only(workers: GpuWorkers[str]) -> None:
    def broken() -> str:
        raise ValueError("odd NVML answer")

    results = workers.run({0: lambda: "ok", 1: broken})
    assert results[0] == Done("ok")
    failed = results[1]
    assert isinstance(failed, Failed)
    assert str(failed.error) == "odd NVML answer"


def test_a_hung_gpu_hangs_alone_and_recovers_without_restart(workers: GpuWorkers[str]) -> None:
    release = threading.Event()
    calls = {"hung": 0}

    def hung() -> str:
        calls["hung"] += 1
        if not release.wait(10):
            raise AssertionError("test never released the hung read")
        return "late"

    reads = {0: lambda: "fresh0", 1: hung, 2: lambda: "fresh2"}
    start = time.perf_counter()
    first = workers.run(reads)
    assert 0.95 <= time.perf_counter() - start < 10  # waited about the timeout
    assert first[0] == Done("fresh0")
    assert first[2] == Done("fresh2")
    assert isinstance(first[1], Hung)
    assert first[1].new
    assert first[1].seconds >= 0.95
    threads = len(reader_threads())

    for _ in range(20):  # later collections: answered at once, no second call queued
        start = time.perf_counter()
        later = workers.run(reads)
        assert time.perf_counter() - start < 0.5
        assert later[0] == Done("fresh0")
        assert later[2] == Done("fresh2")
        assert isinstance(later[1], Hung)
        assert not later[1].new
    assert calls["hung"] == 1
    assert len(reader_threads()) == threads == 3
    assert workers.busy().keys() == {1}
    assert workers.busy()[1] >= 0.95

    release.set()  # the call returns at last: its stale answer is dropped
    deadline = time.monotonic() + 5
    while workers.busy() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert workers.run(reads) == {0: Done("fresh0"), 1: Done("late"), 2: Done("fresh2")}
    assert calls["hung"] == 2


def test_close_stops_idle_threads() -> None:
    pool: GpuWorkers[int] = GpuWorkers(timeout=1.0)
    assert pool.run({0: lambda: 0, 1: lambda: 1}) == {0: Done(0), 1: Done(1)}
    threads = reader_threads()
    assert len(threads) == 2
    pool.close()
    for thread in threads:
        thread.join(2)
        assert not thread.is_alive()
