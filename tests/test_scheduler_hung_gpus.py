"""Scheduler and per-GPU hangs: a hung GPU is served down, /readyz lists it, recovery."""

from __future__ import annotations

import time
from collections.abc import Mapping

from exporter.catalogue.metrics import Group, default_groups
from exporter.scheduler import Backoff, Scheduler
from exporter.snapshot import Snapshot
from tests.scheduler_fakes import FakeSource, make_snapshot


class HangReportingSource(FakeSource):
    """A FakeSource with ``gpus`` GPUs that says which of them have a read hung."""

    def __init__(self, gpus: int) -> None:
        super().__init__()
        self.gpus = gpus
        self.hung: dict[int, float] = {}

    def collect(self, groups: frozenset[Group]) -> Snapshot:
        super().collect(groups)  # counts the call; blocks while the gate is closed
        return make_snapshot(self.collect_calls, gpus=self.gpus)

    def hung_gpus(self) -> Mapping[int, float]:
        return dict(self.hung)


def scheduler(source: FakeSource, **kwargs: float) -> Scheduler:
    args = {"min_interval": 0.0, "timeout": 0.2, "stale_after": 30.0, **kwargs}
    return Scheduler(source, None, groups=default_groups(),
                     backoff=Backoff(jitter=0.0), **args)


def test_one_gpu_read_inline_and_hung_is_served_down_not_up() -> None:
    source = HangReportingSource(gpus=1)
    sched = scheduler(source)
    good = sched.state()
    assert good.snapshot.gpus[0].up
    source.gate.clear()  # the inline read of GPU 0 hangs
    source.hung = {0: 0.3}
    state = sched.state()
    assert state.stale
    gpu = state.snapshot.gpus[0]
    assert not gpu.up
    assert gpu.values == {}  # no stale reading shown as current
    assert "has not returned for 0.3s" in (gpu.error or "")
    assert not sched.ready()  # every GPU is hung
    assert "every GPU's NVML calls are hung: GPU 0 for 0.3s" in sched.stats.reason(30.0)
    assert good.snapshot.gpus[0].up  # the kept snapshot itself is not changed

    source.hung = {}
    source.gate.set()  # the call returns: fresh data, no restart
    deadline = time.monotonic() + 5
    while sched.stats.in_flight_seconds is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    fresh = sched.state()
    assert fresh.snapshot.gpus[0].up
    assert not fresh.stale
    assert sched.ready()
    sched.close()


def test_one_hung_gpu_of_several_keeps_the_exporter_ready_and_is_listed() -> None:
    source = HangReportingSource(gpus=4)
    sched = scheduler(source)
    source.hung = {2: 7.5}  # the source answered it down itself; the collection returned
    state = sched.state()
    assert not state.stale
    assert all(g.up for g in state.snapshot.gpus)  # marking is the source's job here
    assert sched.ready()
    assert sched.stats.hung_gpus == {2: 7.5}
    source.hung = {0: 9.0, 1: 9.0, 2: 9.0, 3: 9.0}
    assert not sched.ready()
    sched.close()


def test_a_broken_hung_gpus_never_breaks_a_scrape() -> None:
    source = HangReportingSource(gpus=2)

    def broken() -> Mapping[int, float]:
        raise RuntimeError("odd")

    source.hung_gpus = broken  # type: ignore[method-assign]
    sched = scheduler(source)
    assert sched.state().snapshot.source_up
    assert sched.ready()
    assert sched.stats.hung_gpus == {}
    sched.close()
