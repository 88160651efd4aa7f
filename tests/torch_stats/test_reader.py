"""The exporter-side reader of publisher files: join by pid, trust rule, bounds, cache, cleanup."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from exporter.attribution import torchstats
from exporter.attribution.torchfile import ensure_directory
from exporter.attribution.torchstats import TORCH_FILE_ERROR_KIND, TorchStatsReader
from gpu_exporter_torch import Publisher, read_self_stat
from tests.fixtures.fakeproc import stat_line, write_boot

MIB = 1 << 20
UUID0 = "GPU-2f6c1c5e-7a1b-4c9d-8e0f-000000000000"
HOST_NS = 4026530001  # below the kernel's namespace inode range: never this host's
CONTAINER_NS = 4026530002


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def procfs(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    write_boot(root)
    _ns_link(root / "1", HOST_NS)
    return root


def _ns_link(proc: Path, namespace: int) -> None:
    (proc / "ns").mkdir(parents=True, exist_ok=True)
    (proc / "ns" / "pid").symlink_to(f"pid:[{namespace}]")


def host_process(
    procfs: Path,
    pid: int,
    *,
    uid: int,
    start_ticks: int,
    own_pid: int | None = None,
    namespace: int | None = HOST_NS,
) -> None:
    """``<procfs>/<pid>`` as the exporter sees a (maybe containerised) process from the host."""
    proc = procfs / str(pid)
    proc.mkdir(parents=True, exist_ok=True)
    (proc / "stat").write_text(stat_line(pid, "python", start_ticks))
    nspid = f"{pid}\t{own_pid}" if own_pid is not None else str(pid)
    (proc / "status").write_text(
        f"Name:\tpython\nPid:\t{pid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nNSpid:\t{nspid}\n"
    )
    if namespace is not None:
        _ns_link(proc, namespace)


def write_file(
    directory: Path,
    pid: int,
    start_ticks: int,
    namespace: int = HOST_NS,
    *,
    devices: list[dict[str, Any]] | None = None,
    fields: dict[str, Any] | None = None,
) -> Path:
    document: dict[str, Any] = {
        "format": 1, "pid": pid, "start_ticks": start_ticks, "pid_namespace": namespace,
        "uid": os.getuid(), "time": 0, "interval_seconds": 5, "torch_version": "2.11.0",
        "devices": devices if devices is not None else [
            {"index": 0, "uuid": UUID0, "allocated_bytes": 100, "reserved_bytes": 200,
             "active_bytes": 100, "inactive_split_bytes": 3, "peak_allocated_bytes": 150,
             "alloc_retries": 2, "ooms": 1}
        ],
    }
    document.update(fields or {})
    path = directory / f"{pid}-{start_ticks}-{namespace}.json"
    path.write_text(json.dumps(document))
    return path


def reader(directory: Path, procfs: Path, **kwargs: Any) -> TorchStatsReader:
    kwargs.setdefault("clock", Clock(_mtime_now(directory)))
    return TorchStatsReader(str(directory), procfs=str(procfs), **kwargs)


def _mtime_now(directory: Path) -> float:
    probe = directory / ".probe"
    probe.write_text("")
    now = probe.stat().st_mtime
    probe.unlink()
    return now


def lookup(stats: TorchStatsReader, pid: int) -> torchstats.TorchFile | None:
    with stats.collection():
        return stats.lookup(pid)


# --- the round trip --------------------------------------------------------------------------
def test_publisher_file_joins_a_containerised_process_by_its_own_pid(
    torch: ModuleType, shared_dir: Path, procfs: Path
) -> None:
    torch.cuda.allocate(0, 300 * MIB)
    assert Publisher(str(shared_dir)).publish_once()
    my_pid, my_ticks = read_self_stat()
    my_ns = os.stat("/proc/self/ns/pid").st_ino
    # The exporter sees this process as host pid 4242 whose own pid is ours.
    host_process(procfs, 4242, uid=os.getuid(), start_ticks=my_ticks, own_pid=my_pid,
                 namespace=my_ns)
    found = lookup(reader(shared_dir, procfs), 4242)
    assert found is not None
    assert (found.pid, found.start_ticks, found.owner_uid) == (my_pid, my_ticks, os.getuid())
    memory = found.device("GPU-" + torch.cuda.uuids[0])
    assert memory is not None
    assert memory.allocated_bytes == 300 * MIB
    assert memory.reserved_bytes == 300 * MIB
    assert memory.ooms == 0
    assert found.device("GPU-other") is None


def test_host_process_matches_when_namespaces_agree(shared_dir: Path, procfs: Path) -> None:
    write_file(shared_dir, 77, 5000)
    host_process(procfs, 77, uid=os.getuid(), start_ticks=5000)
    found = lookup(reader(shared_dir, procfs), 77)
    assert found is not None
    memory = found.device(UUID0)
    assert memory is not None
    assert (memory.allocated_bytes, memory.reserved_bytes, memory.inactive_split_bytes,
            memory.peak_allocated_bytes, memory.alloc_retries, memory.ooms) == (
        100, 200, 3, 150, 2, 1)


# --- the trust rule --------------------------------------------------------------------------
def test_file_owned_by_another_uid_is_never_attached(shared_dir: Path, procfs: Path) -> None:
    # The file is ours; the process belongs to someone else (e.g. a colleague's pid).
    write_file(shared_dir, 77, 5000)
    host_process(procfs, 77, uid=os.getuid() + 1, start_ticks=5000)
    assert lookup(reader(shared_dir, procfs), 77) is None


def test_uid_claimed_inside_the_file_is_ignored(shared_dir: Path, procfs: Path) -> None:
    write_file(shared_dir, 77, 5000, fields={"uid": os.getuid() + 1})
    host_process(procfs, 77, uid=os.getuid() + 1, start_ticks=5000)
    assert lookup(reader(shared_dir, procfs), 77) is None


def test_reused_pid_does_not_inherit_the_old_file(shared_dir: Path, procfs: Path) -> None:
    write_file(shared_dir, 77, 5000)
    host_process(procfs, 77, uid=os.getuid(), start_ticks=9999)
    assert lookup(reader(shared_dir, procfs), 77) is None


def test_other_pid_namespace_is_not_matched(shared_dir: Path, procfs: Path) -> None:
    write_file(shared_dir, 7, 5000, CONTAINER_NS)
    host_process(procfs, 4000, uid=os.getuid(), start_ticks=5000, own_pid=7,
                 namespace=CONTAINER_NS + 1)
    assert lookup(reader(shared_dir, procfs), 4000) is None


def test_ambiguous_files_without_a_readable_namespace_are_not_used(
    shared_dir: Path, procfs: Path
) -> None:
    write_file(shared_dir, 7, 5000, CONTAINER_NS)
    host_process(procfs, 4000, uid=os.getuid(), start_ticks=5000, own_pid=7, namespace=None)
    assert lookup(reader(shared_dir, procfs), 4000) is not None  # one candidate: used
    write_file(shared_dir, 7, 5000, CONTAINER_NS + 1)
    assert lookup(reader(shared_dir, procfs), 4000) is None  # two: neither


def test_stale_files_are_ignored(shared_dir: Path, procfs: Path) -> None:
    write_file(shared_dir, 77, 5000)
    host_process(procfs, 77, uid=os.getuid(), start_ticks=5000)
    clock = Clock(_mtime_now(shared_dir))
    stats = reader(shared_dir, procfs, clock=clock, max_age=60.0)
    assert lookup(stats, 77) is not None
    clock.now += 61
    assert lookup(stats, 77) is None
    assert not stats.has_files


def test_a_slow_publisher_has_three_of_its_intervals(shared_dir: Path, procfs: Path) -> None:
    write_file(shared_dir, 77, 5000, fields={"interval_seconds": 120})
    host_process(procfs, 77, uid=os.getuid(), start_ticks=5000)
    clock = Clock(_mtime_now(shared_dir))
    stats = reader(shared_dir, procfs, clock=clock, max_age=60.0)
    clock.now += 300
    assert lookup(stats, 77) is not None
    clock.now += 61
    assert lookup(stats, 77) is None


# --- hostile and broken input ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "devices"),
    [
        ({"format": 2}, None),
        ({"pid": 78}, None),  # contents do not match the name
        ({"pid": "77"}, None),
        ({}, [{"uuid": UUID0, "allocated_bytes": -1, "reserved_bytes": 0}]),
        ({}, [{"uuid": UUID0, "allocated_bytes": 1.5, "reserved_bytes": 0}]),
        ({}, [{"uuid": UUID0, "allocated_bytes": True, "reserved_bytes": 0}]),
        ({}, [{"uuid": UUID0, "allocated_bytes": 2**63, "reserved_bytes": 0}]),
        ({}, [{"uuid": UUID0, "allocated_bytes": 1}]),  # reserved missing
        ({}, [{"uuid": 5, "allocated_bytes": 1, "reserved_bytes": 1}]),
        ({}, [{"uuid": "GPU-\n", "allocated_bytes": 1, "reserved_bytes": 1}]),
        ({}, [{"uuid": UUID0, "allocated_bytes": 1, "reserved_bytes": 1}] * 65),
        ({"devices": "many"}, None),
        ({"interval_seconds": "5"}, None),
        ({"interval_seconds": -1}, None),
        ({"interval_seconds": 1e9}, None),
    ],
)
def test_malformed_files_are_rejected_and_counted_once(
    shared_dir: Path, procfs: Path, overrides: dict[str, Any], devices: Any
) -> None:
    write_file(shared_dir, 77, 5000, devices=devices, fields=overrides)
    host_process(procfs, 77, uid=os.getuid(), start_ticks=5000)
    stats = reader(shared_dir, procfs)
    for _ in range(3):
        assert lookup(stats, 77) is None
    assert stats.take_errors() == {TORCH_FILE_ERROR_KIND: 1}
    assert stats.take_errors() == {}


@pytest.mark.parametrize(
    "content",
    [b"", b"\xff\xfe", b"null", b"[1,2]", b"[" * 30000 + b"]" * 30000, b"{" * 60000],
)
def test_garbage_is_rejected(shared_dir: Path, procfs: Path, content: bytes) -> None:
    (shared_dir / "77-5000-4026530001.json").write_bytes(content)
    host_process(procfs, 77, uid=os.getuid(), start_ticks=5000)
    stats = reader(shared_dir, procfs)
    assert lookup(stats, 77) is None
    assert stats.take_errors() == {TORCH_FILE_ERROR_KIND: 1}


def test_oversized_file_is_rejected_unread(
    shared_dir: Path, procfs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_file(shared_dir, 77, 5000)
    with path.open("a") as handle:
        handle.write(" " * 70000)
    host_process(procfs, 77, uid=os.getuid(), start_ticks=5000)
    opened: list[str] = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda p, *a: opened.append(str(p)) or real_open(p, *a))
    stats = reader(shared_dir, procfs, max_file_bytes=65536)
    assert lookup(stats, 77) is None
    assert str(path) not in opened
    assert stats.take_errors() == {TORCH_FILE_ERROR_KIND: 1}


def test_symlinks_and_fifos_are_never_followed_or_opened(
    shared_dir: Path, procfs: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = write_file(elsewhere, 77, 5000)
    (shared_dir / target.name).symlink_to(target)
    os.mkfifo(shared_dir / "78-5000-4026530001.json")  # opening it for reading would block
    host_process(procfs, 77, uid=os.getuid(), start_ticks=5000)
    host_process(procfs, 78, uid=os.getuid(), start_ticks=5000)
    stats = reader(shared_dir, procfs)
    assert lookup(stats, 77) is None
    assert lookup(stats, 78) is None
    assert stats.take_errors() == {TORCH_FILE_ERROR_KIND: 2}


def test_file_count_is_bounded(shared_dir: Path, procfs: Path) -> None:
    for pid in range(100, 150):
        write_file(shared_dir, pid, 5000, CONTAINER_NS)
    (shared_dir / "unrelated.txt").write_text("x")
    stats = reader(shared_dir, procfs, max_files=10, cleanup_interval=1e9)
    stats.scan()
    assert 9 <= len(stats._versions) <= 10  # entries looked at, the unrelated one included


def test_entries_with_other_names_count_against_the_bound(
        shared_dir: Path, procfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for junk in range(200):
        (shared_dir / f".junk-{junk}.tmp").write_text("x")
    write_file(shared_dir, 100, 5000, CONTAINER_NS)
    yielded = [0]
    real_scandir = os.scandir

    class Counting:
        def __init__(self, path: str) -> None:
            self._it = real_scandir(path)

        def __enter__(self) -> Counting:
            return self

        def __exit__(self, *exc: object) -> None:
            self._it.close()

        def __iter__(self) -> Counting:
            return self

        def __next__(self) -> os.DirEntry[str]:
            entry = next(self._it)
            yielded[0] += 1
            return entry

    monkeypatch.setattr(torchstats.os, "scandir", Counting)
    stats = reader(shared_dir, procfs, max_files=10, cleanup_interval=1e9)
    stats.scan()
    assert yielded[0] <= 11  # not 201: a directory of junk names costs max_files entries


def test_missing_directory_is_reported_not_raised(tmp_path: Path, procfs: Path) -> None:
    stats = TorchStatsReader(str(tmp_path / "absent"), procfs=str(procfs))
    assert lookup(stats, 1) is None
    assert stats.scan_error is not None
    assert "absent" in stats.scan_error


# --- cost ------------------------------------------------------------------------------------
def test_unchanged_files_are_not_reread(
    shared_dir: Path, procfs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_file(shared_dir, 77, 5000)
    host_process(procfs, 77, uid=os.getuid(), start_ticks=5000)
    stats = reader(shared_dir, procfs)
    parses: list[bytes] = []
    real_parse = torchstats.parse_document
    monkeypatch.setattr(torchstats, "parse_document",
                        lambda data, **kw: parses.append(data) or real_parse(data, **kw))
    for _ in range(3):
        assert lookup(stats, 77) is not None
    assert len(parses) == 1
    write_file(shared_dir, 77, 5000, devices=[
        {"uuid": UUID0, "allocated_bytes": 1, "reserved_bytes": 2}])
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1))
    found = lookup(stats, 77)
    assert len(parses) == 2
    assert found is not None
    memory = found.device(UUID0)
    assert memory is not None
    assert memory.allocated_bytes == 1


def test_processes_are_not_looked_up_when_no_file_is_fresh(
    shared_dir: Path, procfs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host_process(procfs, 77, uid=os.getuid(), start_ticks=5000)
    stats = reader(shared_dir, procfs)
    monkeypatch.setattr(torchstats, "read_small", lambda *a: pytest.fail("read /proc"))
    assert lookup(stats, 77) is None


# --- cleanup ---------------------------------------------------------------------------------
def test_files_of_exited_processes_and_long_silent_files_are_removed(
    shared_dir: Path, procfs: Path
) -> None:
    alive = write_file(shared_dir, 77, 5000)
    exited = write_file(shared_dir, 78, 5000)
    reused = write_file(shared_dir, 79, 5000)
    other_namespace = write_file(shared_dir, 7, 5000, CONTAINER_NS)
    host_process(procfs, 77, uid=os.getuid(), start_ticks=5000)
    host_process(procfs, 79, uid=os.getuid(), start_ticks=6000)
    clock = Clock(_mtime_now(shared_dir))
    stats = reader(shared_dir, procfs, clock=clock, remove_after=600, cleanup_interval=30)
    stats.scan()
    assert alive.exists()
    assert other_namespace.exists()  # cannot tell whether a container's pid 7 lives
    assert not exited.exists()
    assert not reused.exists()
    clock.now += 601
    stats.scan()
    assert not other_namespace.exists()
    assert not alive.exists()  # its publisher went silent 10 minutes ago


def test_ensure_directory_creates_a_sticky_world_writable_directory(tmp_path: Path) -> None:
    directory = tmp_path / "run" / "torch"
    assert list(ensure_directory(str(directory))) == []
    assert stat.S_IMODE(directory.stat().st_mode) == 0o1777
    directory.chmod(0o755)
    assert list(ensure_directory(str(directory))) == []  # ours: mode repaired
    assert stat.S_IMODE(directory.stat().st_mode) == 0o1777
    blocker = tmp_path / "file"
    blocker.write_text("")
    warnings = list(ensure_directory(str(blocker / "torch")))
    assert len(warnings) == 1
    assert "cannot prepare" in warnings[0]
