"""Tests for attribution.owners against fake procfs trees (and once against the real /proc)."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import psutil
import pytest

from exporter.attribution import owners
from exporter.attribution.owners import (
    OwnerLookup,
    OwnerResolver,
    OwnerStatus,
    ProcfsError,
    check_procfs,
    parse_stat,
)
from tests.fixtures.fakeproc import BOOT_TIME, stat_line, write_boot, write_process
from tests.scheduler_fakes import FakeClock

PASSWD = Path(__file__).parent.parent / "fixtures" / "host_passwd"
TICKS = os.sysconf("SC_CLK_TCK")


@pytest.fixture
def procfs(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    write_boot(root)
    return root


def make_resolver(procfs: Path, **kwargs: object) -> OwnerResolver:
    return OwnerResolver(procfs=str(procfs), passwd_file=str(PASSWD), **kwargs)  # type: ignore[arg-type]


def count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    real_read = owners.read_small

    def counting(path: str, limit: int = 4096) -> bytes:
        reads.append(path)
        return real_read(path, limit)

    monkeypatch.setattr(owners, "read_small", counting)
    return reads


def deny(monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
    """Make reads of files ending in ``suffix`` fail as under hidepid or strict modes."""
    real_read = owners.read_small

    def denying(path: str, limit: int = 4096) -> bytes:
        if path.endswith(suffix):
            raise PermissionError(13, "Permission denied", path)
        return real_read(path, limit)

    monkeypatch.setattr(owners, "read_small", denying)


def test_resolves_uid_user_name_and_start_time(procfs: Path) -> None:
    write_process(procfs, 4242, uid=1001, comm="python3", start_ticks=123_456)
    owner = make_resolver(procfs).resolve(4242)
    assert owner is not None
    assert owner.uid == 1001  # the real uid (the fixture's effective uid is 1002)
    assert owner.user == "alice"
    assert owner.name == "python3"
    assert owner.start_time_seconds == pytest.approx(BOOT_TIME + 123_456 / TICKS)
    assert owner.cmdline is None  # not asked for


def test_unknown_uid_gets_numeric_name(procfs: Path) -> None:
    write_process(procfs, 7, uid=1000770000, comm="vllm", start_ticks=5)  # OpenShift-style uid
    owner = make_resolver(procfs).resolve(7)
    assert owner is not None
    assert owner.user == "1000770000"


@pytest.mark.parametrize("comm", ["a b", "x) (y", "((", "tricky) S 1 2 )", "ok"])
def test_stat_comm_with_spaces_and_parentheses(comm: str) -> None:
    assert parse_stat(stat_line(9, comm, 987_654).encode()) == (comm, 987_654)


@pytest.mark.parametrize("data", [b"", b"12 (x", b"12 (x) S 1 2", b"12 (x) " + b"a " * 30])
def test_garbled_stat_is_denied_and_counted(procfs: Path, data: bytes) -> None:
    proc = write_process(procfs, 12, uid=0, comm="x", start_ticks=1)
    (proc / "stat").write_bytes(data)
    resolver = make_resolver(procfs)
    assert resolver.lookup(12) == OwnerLookup(OwnerStatus.DENIED)
    assert resolver.take_errors() == {"owner_lookup": 1}


def test_name_comes_from_comm_even_with_spaces(procfs: Path) -> None:
    write_process(procfs, 31, uid=0, comm="kworker) S (1", start_ticks=77)
    owner = make_resolver(procfs).resolve(31)
    assert owner is not None
    assert owner.name == "kworker) S (1"
    assert owner.start_time_seconds == pytest.approx(BOOT_TIME + 77 / TICKS)


def test_cmdline_only_when_asked(procfs: Path) -> None:
    args = ["python", "train.py", "--token=s3cret"]
    write_process(procfs, 50, uid=1002, comm="python", start_ticks=9, cmdline=args)
    assert make_resolver(procfs).resolve(50).cmdline is None  # type: ignore[union-attr]
    owner = make_resolver(procfs, include_cmdline=True).resolve(50)
    assert owner is not None
    assert owner.cmdline == "python train.py --token=s3cret"


def test_empty_cmdline_is_none(procfs: Path) -> None:
    write_process(procfs, 51, uid=0, comm="kthreadd", start_ticks=2, cmdline=[])
    owner = make_resolver(procfs, include_cmdline=True).resolve(51)
    assert owner is not None
    assert owner.cmdline is None


def test_warm_path_is_one_stat_read_per_pid_per_collection(
    procfs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for pid in (100, 101, 102):
        write_process(procfs, pid, uid=1001, comm="w", start_ticks=pid)
    resolver = make_resolver(procfs, include_cmdline=True)
    reads = count_reads(monkeypatch)
    with resolver.collection():
        first = [resolver.resolve(pid) for pid in (100, 101, 102)]
    assert len(reads) == 3 * 4  # cold: stat, status, comm, cmdline
    reads.clear()
    with resolver.collection():
        for _ in range(8):  # the same pid on 8 GPUs
            again = [resolver.resolve(pid) for pid in (100, 101, 102)]
    assert again == first
    assert sorted(reads) == [f"{procfs}/{pid}/stat" for pid in (100, 101, 102)]


def test_reused_pid_is_not_mislabelled(procfs: Path) -> None:
    write_process(procfs, 300, uid=1001, comm="old", start_ticks=1000)
    resolver = make_resolver(procfs)
    with resolver.collection():
        assert resolver.resolve(300).user == "alice"  # type: ignore[union-attr]
    shutil.rmtree(procfs / "300")
    write_process(procfs, 300, uid=1002, comm="new", start_ticks=5000)
    with resolver.collection():
        owner = resolver.resolve(300)
    assert owner is not None
    assert (owner.user, owner.name) == ("bob", "new")
    assert owner.start_time_seconds == pytest.approx(BOOT_TIME + 5000 / TICKS)


def test_pids_not_seen_in_a_collection_are_evicted(
    procfs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_process(procfs, 400, uid=0, comm="a", start_ticks=1)
    write_process(procfs, 401, uid=0, comm="b", start_ticks=1)
    resolver = make_resolver(procfs)
    with resolver.collection():
        resolver.resolve(400)
        resolver.resolve(401)
    with resolver.collection():
        resolver.resolve(400)  # 401 not listed this time
    reads = count_reads(monkeypatch)
    with resolver.collection():
        resolver.resolve(400)
        resolver.resolve(401)
    assert reads.count(f"{procfs}/400/stat") == 1
    assert f"{procfs}/401/status" in reads  # 401 had been evicted: read in full again


def test_cache_is_bounded_without_collections(procfs: Path) -> None:
    for pid in range(1, 21):
        write_process(procfs, pid, uid=0, comm="p", start_ticks=pid)
    resolver = make_resolver(procfs, max_entries=5)
    for pid in range(1, 21):
        assert resolver.resolve(pid) is not None
    assert len(resolver._pids.entries) == 5
    assert not resolver._pids._seen  # nothing tracked for eviction outside collections


def test_never_visible_pid_is_kept_unknown_and_counted(procfs: Path) -> None:
    resolver = make_resolver(procfs)
    with resolver.collection():
        assert resolver.lookup(999) == OwnerLookup(OwnerStatus.NOT_VISIBLE)
        assert resolver.lookup(999).status is OwnerStatus.NOT_VISIBLE  # memoised: counted once
    assert resolver.take_errors() == {"owner_lookup": 1}
    assert resolver.take_errors() == {}


@pytest.mark.parametrize("missing", ["status", "comm", "cmdline"])
def test_exit_during_the_lookup_is_vanished_and_not_counted(procfs: Path, missing: str) -> None:
    proc = write_process(procfs, 500, uid=0, comm="short", start_ticks=3)
    (proc / missing).unlink()  # stat was readable, then the entry went away
    resolver = make_resolver(procfs, include_cmdline=True)
    assert resolver.lookup(500) == OwnerLookup(OwnerStatus.VANISHED)
    assert resolver.take_errors() == {}


def test_exit_after_an_earlier_collection_is_vanished(procfs: Path) -> None:
    write_process(procfs, 600, uid=0, comm="job", start_ticks=3)
    resolver = make_resolver(procfs)
    with resolver.collection():
        assert resolver.lookup(600).status is OwnerStatus.FOUND
    shutil.rmtree(procfs / "600")
    with resolver.collection():
        assert resolver.lookup(600).status is OwnerStatus.VANISHED
    assert resolver.take_errors() == {}
    with resolver.collection():  # NVML still lists it: now it is memory nobody can be seen for
        assert resolver.lookup(600).status is OwnerStatus.NOT_VISIBLE
    assert resolver.take_errors() == {"owner_lookup": 1}


def test_esrch_is_vanished(procfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def gone(path: str, limit: int = 4096) -> bytes:
        raise ProcessLookupError(3, "No such process", path)

    write_process(procfs, 610, uid=0, comm="z", start_ticks=3)
    monkeypatch.setattr(owners, "read_small", gone)
    assert make_resolver(procfs).lookup(610).status is OwnerStatus.VANISHED


@pytest.mark.parametrize("suffix", ["/stat", "/status"])
def test_permission_denied_without_uid_is_unknown_and_counted(
    procfs: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    write_process(procfs, 700, uid=1001, comm="hidden", start_ticks=3)
    deny(monkeypatch, suffix)
    resolver = make_resolver(procfs)
    assert resolver.lookup(700) == OwnerLookup(OwnerStatus.DENIED)
    assert resolver.take_errors() == {"owner_lookup": 1}


@pytest.mark.parametrize("suffix", ["/comm", "/cmdline"])
def test_permission_denied_with_uid_gives_partial_owner(
    procfs: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    write_process(procfs, 710, uid=1001, comm="secretive", start_ticks=3, cmdline=["a", "b"])
    deny(monkeypatch, suffix)
    resolver = make_resolver(procfs, include_cmdline=True)
    for _ in range(2):  # partial owners are not cached: retried and counted each collection
        with resolver.collection():
            found = resolver.lookup(710)
        assert found.status is OwnerStatus.PARTIAL
        assert found.owner is not None
        assert (found.owner.uid, found.owner.user, found.owner.name) == (1001, "alice", "secretive")
        assert found.owner.cmdline == (None if suffix == "/cmdline" else "a b")
        assert resolver.take_errors() == {"owner_lookup": 1}


def test_directory_instead_of_file_is_denied(procfs: Path) -> None:
    proc = write_process(procfs, 720, uid=0, comm="odd", start_ticks=3)
    (proc / "status").unlink()
    (proc / "status").mkdir()
    assert make_resolver(procfs).lookup(720).status is OwnerStatus.DENIED


@pytest.mark.parametrize("pid", [0, -1])
def test_invalid_pid_is_denied(procfs: Path, pid: int) -> None:
    resolver = make_resolver(procfs)
    assert resolver.lookup(pid).status is OwnerStatus.DENIED
    assert resolver.take_errors() == {"owner_lookup": 1}


def test_passwd_change_renames_cached_owners(tmp_path: Path, procfs: Path) -> None:
    passwd = tmp_path / "passwd"
    passwd.write_text("alice:x:1001:1001::/:/bin/sh\n")
    write_process(procfs, 800, uid=1001, comm="nb", start_ticks=3)
    clock = FakeClock()
    resolver = OwnerResolver(procfs=str(procfs), passwd_file=str(passwd), clock=clock)
    with resolver.collection():
        assert resolver.resolve(800).user == "alice"  # type: ignore[union-attr]
    passwd.write_text("alice2:x:1001:1001::/home:/bin/sh\n")
    clock.now += 10
    with resolver.collection():
        assert resolver.resolve(800).user == "alice2"  # type: ignore[union-attr]


def test_missing_passwd_at_runtime_counts_and_uses_uids(tmp_path: Path, procfs: Path) -> None:
    write_process(procfs, 810, uid=1001, comm="nb", start_ticks=3)
    resolver = OwnerResolver(procfs=str(procfs), passwd_file=str(tmp_path / "gone"))
    with resolver.collection():
        assert resolver.resolve(810).user == "1001"  # type: ignore[union-attr]
    assert resolver.take_errors() == {"passwd_file": 1}


def test_check_procfs(tmp_path: Path, procfs: Path) -> None:
    check_procfs(str(procfs))
    check_procfs(str(procfs) + "/")
    with pytest.raises(ProcfsError, match="cannot read"):
        check_procfs(str(tmp_path / "nothing"))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "stat").write_text("cpu 1 2 3\n")
    with pytest.raises(ProcfsError, match="no btime"):
        check_procfs(str(tmp_path / "bad"))


def test_missing_btime_falls_back_to_the_kernel_boot_time(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    write_process(root, 900, uid=0, comm="x", start_ticks=250)
    owner = make_resolver(root).resolve(900)
    assert owner is not None
    assert owner.start_time_seconds == pytest.approx(psutil.boot_time() + 250 / TICKS, abs=1)


def test_own_process_via_the_real_proc() -> None:
    resolver = OwnerResolver(passwd_file=str(PASSWD))
    owner = resolver.resolve(os.getpid())
    assert owner is not None
    assert owner.uid == os.getuid()
    assert owner.name == psutil.Process().name()[:15]
    assert owner.start_time_seconds == pytest.approx(psutil.Process().create_time(), abs=1.0)
    assert owner.start_time_seconds <= time.time()


def test_concurrent_lookups_are_consistent(procfs: Path) -> None:
    for pid in range(1000, 1032):
        write_process(procfs, pid, uid=1001, comm="t", start_ticks=pid)
    resolver = make_resolver(procfs)
    results: list[list[object]] = []

    def lookup() -> None:
        results.append([resolver.resolve(pid) for pid in range(1000, 1032)])

    threads = [threading.Thread(target=lookup) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(results) == 4
    assert all(result == results[0] for result in results)
    assert all(owner is not None for owner in results[0])


POD_CGROUP = "12:memory:/kubepods/besteffort/pod{uid}/{cid}\n".format(
    uid="5f0e7c2a-3b1d-4e8f-9a6b-1c2d3e4f5a6b", cid="ab" * 32)


def test_cgroup_is_read_with_the_owner_and_cached_per_start_time(procfs: Path) -> None:
    write_process(procfs, 300, uid=1001, comm="train", start_ticks=7, cgroup=POD_CGROUP)
    resolver = make_resolver(procfs, cgroups=True)
    with resolver.collection():
        first = resolver.lookup(300)
    assert first.cgroup is not None
    assert first.cgroup.ids["container_id"] == "ab" * 32
    (procfs / "300" / "cgroup").unlink()
    with resolver.collection():
        assert resolver.lookup(300).cgroup == first.cgroup  # same process: nothing re-read
    write_process(procfs, 300, uid=1001, comm="train", start_ticks=8)  # pid reused, no cgroup
    with resolver.collection():
        assert resolver.lookup(300).status is OwnerStatus.VANISHED  # a new process: re-read
    assert resolver.take_errors() == {}


def test_unreadable_cgroup_keeps_the_owner_and_is_counted(procfs: Path) -> None:
    write_process(procfs, 301, uid=1001, comm="train", start_ticks=7)
    (procfs / "301" / "cgroup").mkdir()
    resolver = make_resolver(procfs, cgroups=True)
    found = resolver.lookup(301)
    assert found.status is OwnerStatus.FOUND
    assert found.owner is not None
    assert found.cgroup is None
    assert resolver.take_errors() == {"pod_lookup": 1}


def test_cgroups_are_not_read_unless_asked(procfs: Path) -> None:
    write_process(procfs, 302, uid=1001, comm="train", start_ticks=7, cgroup=POD_CGROUP)
    assert make_resolver(procfs).lookup(302).cgroup is None
