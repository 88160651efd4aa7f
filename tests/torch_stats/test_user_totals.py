"""Per-(GPU, user) PyTorch counters (exporter.attribution.torchtotals): monotonic across
process exits, resets and GPUs that stop answering, and exposed as counters per user."""

from __future__ import annotations

from dataclasses import replace

from exporter.attribution.torchtotals import TorchUserTotals
from exporter.catalogue.metrics import Group, allocator
from exporter.snapshot import GpuProcess, GpuReading, Snapshot
from exporter.state import ExpositionOptions
from tests.exposition import factory
from tests.exposition.parse import collect_text, series, value

OOMS, RETRIES = allocator.USER_TORCH_OOMS.name, allocator.USER_TORCH_ALLOC_RETRIES.name


def _process(pid: int, ooms: float | None, retries: float | None = 0.0, *,
             user: str | None = "alice") -> GpuProcess:
    process = factory.process(pid, 1 << 30, user=user)
    values = dict(process.values)
    for name, count in ((allocator.TORCH_OOMS.name, ooms),
                        (allocator.TORCH_ALLOC_RETRIES.name, retries)):
        if count is not None:
            values[name] = count
    return replace(process, values=values)


def _snapshot(*gpus: tuple[GpuProcess, ...], up: tuple[bool, ...] = ()) -> Snapshot:
    return factory.snapshot(*(factory.reading(index, processes, up=up[index] if up else True)
                              for index, processes in enumerate(gpus)))


def _totals(snapshot: Snapshot, name: str = OOMS, gpu: int = 0) -> dict[str, float] | None:
    found = snapshot.gpus[gpu].labelled(name)
    return dict(found) if found is not None else None


def test_processes_of_the_first_snapshot_count_from_then_new_ones_from_zero() -> None:
    totals = TorchUserTotals()
    first = totals.enrich(_snapshot((_process(1, 5, 7),)))
    assert _totals(first) == {"alice": 0.0}
    assert _totals(first, RETRIES) == {"alice": 0.0}
    later = totals.enrich(_snapshot((_process(1, 6, 7), _process(2, 2, user="bob"))))
    assert _totals(later) == {"alice": 1.0, "bob": 2.0}


def test_an_exited_process_keeps_its_count_in_the_users_total() -> None:
    totals = TorchUserTotals()
    totals.enrich(_snapshot(()))
    totals.enrich(_snapshot((_process(1, 3), _process(2, 1))))
    assert _totals(totals.enrich(_snapshot((_process(2, 1),)))) == {"alice": 4.0}
    assert _totals(totals.enrich(_snapshot(()))) == {"alice": 4.0}  # no process left
    assert _totals(totals.enrich(_snapshot((_process(3, 1),)))) == {"alice": 5.0}


def test_a_reused_pid_is_another_process() -> None:
    totals = TorchUserTotals()
    totals.enrich(_snapshot(()))
    totals.enrich(_snapshot((_process(1, 3),)))
    reused = replace(_process(1, 1), owner=replace(_process(1, 1).owner,  # type: ignore[type-var]
                                                   start_time_seconds=9e9))
    assert _totals(totals.enrich(_snapshot((reused,)))) == {"alice": 4.0}


def test_a_count_that_goes_down_is_a_reset_not_a_loss() -> None:
    totals = TorchUserTotals()
    totals.enrich(_snapshot(()))
    totals.enrich(_snapshot((_process(1, 4),)))
    assert _totals(totals.enrich(_snapshot((_process(1, 1),)))) == {"alice": 5.0}
    assert _totals(totals.enrich(_snapshot((_process(1, 2),)))) == {"alice": 6.0}


def test_missing_figures_keep_the_count_until_the_process_leaves() -> None:
    totals = TorchUserTotals()
    totals.enrich(_snapshot(()))
    totals.enrich(_snapshot((_process(1, 2),)))
    late = _process(1, None, None)  # the publisher's file is late this time
    assert _totals(totals.enrich(_snapshot((late,)))) == {"alice": 2.0}
    assert _totals(totals.enrich(_snapshot((_process(1, 2),)))) == {"alice": 2.0}


def test_a_gpu_that_is_down_loses_nothing_and_hides_no_other_gpu() -> None:
    totals = TorchUserTotals()
    totals.enrich(_snapshot((), ()))
    totals.enrich(_snapshot((_process(1, 2),), (_process(2, 1, user="bob"),)))
    down = totals.enrich(_snapshot((), (_process(2, 3, user="bob"),), up=(False, True)))
    assert _totals(down) is None
    assert _totals(down, gpu=1) == {"bob": 3.0}
    back = totals.enrich(_snapshot((_process(1, 2),), (_process(2, 3, user="bob"),)))
    assert _totals(back) == {"alice": 2.0}


def test_processes_without_owner_count_as_unknown_and_others_get_no_series() -> None:
    totals = TorchUserTotals()
    totals.enrich(_snapshot(()))
    plain = factory.process(3, 1 << 30)  # no publisher: no figures
    enriched = totals.enrich(_snapshot((_process(1, 1, user=None), plain)))
    assert _totals(enriched) == {"unknown": 1.0}
    fresh = TorchUserTotals().enrich(_snapshot((plain,)))
    assert _totals(fresh) is None


def test_exposed_as_counters_per_gpu_and_user_with_the_torch_group_only() -> None:
    totals = TorchUserTotals()
    totals.enrich(_snapshot(()))
    snapshot = totals.enrich(_snapshot((_process(1, 2, 5), _process(2, 1, 0, user="bob"))))
    gpu: GpuReading = snapshot.gpus[0]
    text = collect_text(factory.state(snapshot), ExpositionOptions(
        groups=frozenset({*ExpositionOptions().groups, Group.TORCH})))
    assert "# TYPE gpu_user_torch_ooms_total counter" in text
    assert {labels["uuid"] for labels in series(text, OOMS)} == {gpu.identity.uuid}
    for name, expected in ((OOMS, {"alice": 2.0, "bob": 1.0}),
                           (RETRIES, {"alice": 5.0, "bob": 0.0})):
        assert {user: value(text, name, user=user) for user in expected} == expected
    assert not series(collect_text(factory.state(snapshot), ExpositionOptions()), OOMS)
