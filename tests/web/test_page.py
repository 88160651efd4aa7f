"""Landing page rendering: tables, hints, down GPUs, escaping, refresh."""

from __future__ import annotations

from dataclasses import replace

from exporter.catalogue import thresholds
from exporter.catalogue.metrics import PROCESS_LAST_ACTIVE
from exporter.snapshot import GpuProcess, ProcessOwner, ProcessType, Snapshot
from exporter.state import ExporterState
from exporter.web.page import TOP_PROCESSES, render_landing
from tests.exposition.factory import ROWS_BY_FIELD, pod
from tests.scheduler_fakes import make_snapshot

GIB = 1 << 30


def _state(snapshot: Snapshot, stale: bool = False) -> ExporterState:
    return ExporterState(snapshot=snapshot, data_age_seconds=1.5, stale=stale,
                         last_success_timestamp=None)


def _render(snapshot: Snapshot, **kwargs: object) -> str:
    return render_landing(_state(snapshot, bool(kwargs.pop("stale", False))), version="9.9",
                          metrics_path="/metrics", **kwargs)  # type: ignore[arg-type]


def _gpu(snapshot: Snapshot, index: int = 0, **fields: object) -> Snapshot:
    """``snapshot`` with GPU ``index`` changed: reading fields, or values by JSON field name."""
    gpus = list(snapshot.gpus)
    values = dict(gpus[index].values)
    for name in [n for n in fields if n in ROWS_BY_FIELD]:
        values[ROWS_BY_FIELD[name].name] = fields.pop(name)  # type: ignore[assignment]
    gpus[index] = replace(gpus[index], values=values, **fields)  # type: ignore[arg-type]
    return replace(snapshot, gpus=tuple(gpus))


def _proc(pid: int, memory: int, user: str = "alice") -> GpuProcess:
    return GpuProcess(pid=pid, type=ProcessType.COMPUTE, used_memory_bytes=memory,
                      owner=ProcessOwner(uid=1000, user=user, name="python3",
                                         start_time_seconds=0.0))


def test_hints_follow_the_guide() -> None:
    idle = _gpu(make_snapshot(), memory_used_bytes=60 * GIB, utilization_ratio=0.0)
    assert "memory held but GPU idle" in _render(idle)
    full_hot = _gpu(make_snapshot(), memory_used_bytes=78 * GIB, utilization_ratio=0.9,
                    temperature_celsius=85.0)
    page = _render(full_hot)
    assert "memory almost full" in page
    assert "hot: check cooling" in page
    assert 'class="bar high"' in page
    calm = _gpu(make_snapshot(), memory_used_bytes=10 * GIB, utilization_ratio=0.9,
                temperature_celsius=60.0)
    assert '<td class="hint"></td>' in _render(calm)


def test_down_gpu_shows_its_error_and_others_stay() -> None:
    snap = _gpu(make_snapshot(gpus=2), 1, up=False, error="GPU is lost <reset needed>")
    page = _render(snap)
    assert "down: GPU is lost &lt;reset needed&gt;" in page
    assert page.count("Fake GPU") == 2


def test_top_processes_sorted_and_capped() -> None:
    processes = tuple(_proc(100 + i, (i + 1) * GIB) for i in range(TOP_PROCESSES + 5))
    snap = _gpu(make_snapshot(), processes=processes)
    page = _render(snap)
    table = page[page.index('<table id="processes">'):]
    assert table.count("<tr><td>0</td>") == TOP_PROCESSES
    biggest = table.index(f"<td>{100 + TOP_PROCESSES + 4}</td>")
    second = table.index(f"<td>{100 + TOP_PROCESSES + 3}</td>")
    assert biggest < second
    assert "<td>100</td>" not in table  # the smallest fell off


def test_pods_and_hostile_text_are_escaped() -> None:
    proc = replace(_proc(7, GIB, user='"><img src=x>'),
                   workload=pod("ml", "train-<0>"))
    snap = replace(_gpu(make_snapshot(), processes=(proc,)), hostname="<b>host</b>")
    page = _render(snap)
    assert "<img src=x>" not in page
    assert "&quot;&gt;&lt;img src=x&gt;" in page
    assert "ml/train-&lt;0&gt;" in page
    assert "&lt;b&gt;host&lt;/b&gt;" in page


def test_refresh_and_stale_notice() -> None:
    page = _render(make_snapshot(), refresh_seconds=7, stale=True)
    assert '<meta http-equiv="refresh" content="7">' in page
    assert "Stale data" in page
    assert "1.5 s (stale)" in page


def test_idle_for_shows_time_since_the_last_kernel() -> None:
    taken = 1_000_000.0
    busy = replace(_proc(1, 2 * GIB, "bob"), sm_utilization_ratio=0.9,
                   values={PROCESS_LAST_ACTIVE.name: taken - 2})
    idle = replace(_proc(2, 30 * GIB, "alice"), sm_utilization_ratio=0.0,
                   values={PROCESS_LAST_ACTIVE.name: taken - 3 * 3600 - 120})
    unseen = replace(_proc(3, GIB, "carol"), sm_utilization_ratio=0.0)
    snap = replace(_gpu(make_snapshot(), processes=(busy, idle, unseen)), taken_at=taken)
    page = _render(snap)
    table = page[page.index('<table id="processes">'):]
    rows = {row.split("</td><td>")[2]: row for row in table.split("<tr>")[2:]}
    assert "<th>Idle for</th>" in table
    assert '<td class="num idle">active</td>' in rows["bob"]
    assert '<td class="num idle">3h2m</td>' in rows["alice"]
    assert '<td class="num idle">no kernel seen</td>' in rows["carol"]
def test_idle_hint_uses_the_alert_thresholds() -> None:
    total = 80 * GIB  # make_snapshot's GPU
    held = thresholds.IDLE_GPU_MEMORY_RATIO * 1.5
    idle = _gpu(make_snapshot(), memory_used_bytes=int(total * held), utilization_ratio=0.0)
    assert "memory held but GPU idle" in _render(idle)
    edge = _gpu(make_snapshot(), memory_used_bytes=int(total * thresholds.IDLE_GPU_MEMORY_RATIO),
                utilization_ratio=0.0)
    assert "memory held but GPU idle" not in _render(edge)  # the alert needs more than that
    busy = _gpu(make_snapshot(), memory_used_bytes=int(total * held),
                utilization_ratio=thresholds.IDLE_UTILIZATION_RATIO)
    assert "memory held but GPU idle" not in _render(busy)


def _process_header(page: str) -> list[str]:
    table = page[page.index('<table id="processes">'):]
    header = table[table.index("<thead>"):table.index("</thead>")]
    return [cell.split("</th>")[0] for cell in header.split("<th>")[1:]]


def test_pod_column_only_when_a_process_is_in_a_pod() -> None:
    host = _proc(7, 2 * GIB)
    workstation = _render(_gpu(make_snapshot(), processes=(host,)))
    assert "Pod" not in _process_header(workstation)
    row = workstation[workstation.index("<td>7</td>") - 12:]
    assert row[:row.index("</tr>")].count("<td") == len(_process_header(workstation))
    in_pod = replace(_proc(8, GIB), workload=pod("ml", "train-0"))
    node = _render(_gpu(make_snapshot(), processes=(host, in_pod)))
    header = _process_header(node)
    assert header[4] == "Pod"
    assert "<td>ml/train-0</td>" in node
    assert "<td>alice</td><td>python3</td><td></td>" in node  # the host process: empty cell
    nothing = _render(_gpu(make_snapshot(), processes=()))
    assert f'<td colspan="{len(_process_header(nothing))}">No processes.</td>' in nothing
