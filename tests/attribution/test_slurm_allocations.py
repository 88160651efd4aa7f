"""Slurm's allocation files: names and contents parsed, the directory read and re-read only
where it changed, hostile files refused, the join with the GPUs and MIG devices."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.attribution.slurm_allocations import (
    ERROR_KIND,
    AllocationFile,
    AllocationFiles,
    SlurmAllocations,
    join_slurm_allocations,
)
from exporter.catalogue.gpustat import DeviceName, JobHolder, parse_content, parse_name
from exporter.health import MigDevice
from exporter.snapshot import Snapshot
from tests.exposition import factory as f

UUID0 = "GPU-0f4a1c2e-5b6d-4e8f-9a0b-1c2d3e4f5a6b"
MIG = "MIG-5c1e0f3a-8d2b-4c6e-a1f0-3b5d7e9c1a2f"


@pytest.mark.parametrize(("name", "expected"), [
    ("0", DeviceName(index=0)),
    ("13", DeviceName(index=13)),
    ("3.7", DeviceName(index=3, gpu_instance=7)),
    (UUID0, DeviceName(uuid=UUID0)),
    (MIG, DeviceName(uuid=MIG)),
    ("01", None), ("-1", None), ("0.", None), ("GPU-xyz", None), (".0.tmp", None),
    ("0~", None), ("gpu0", None), (UUID0 + ".bak", None), ("99999", None), ("", None),
])
def test_file_names(name: str, expected: DeviceName | None) -> None:
    assert parse_name(name) == expected


@pytest.mark.parametrize(("data", "expected"), [
    (b"913377 2001\n", JobHolder("913377", "2001")),
    (b"  913377   2001  ", JobHolder("913377", "2001")),
    (b"913377\n", JobHolder("913377", "")),
    (b"4294967295 4294967295", JobHolder("4294967295", "4294967295")),
    (b"", None), (b"\n", None), (b"0 1000", None), (b"4294967296 1", None),
    (b"12 34 56", None), (b"12\n34", None), (b"abc 1000", None), (b"12 -1", None),
    (b"\xff\xfe12 3", None), (b"1e3 1", None), (b"\x0012 3", None),
])
def test_file_contents(data: bytes, expected: JobHolder | None) -> None:
    assert parse_content(data) == expected


def _write(directory: Path, name: str, text: str) -> None:
    (directory / name).write_text(text)


def test_reads_the_files_and_ignores_other_names(tmp_path: Path) -> None:
    _write(tmp_path, "0", "11 1001\n")
    _write(tmp_path, UUID0, "11 1001\n")
    _write(tmp_path, ".0.tmp", "garbage")
    _write(tmp_path, "README", "not an allocation")
    files = AllocationFiles(str(tmp_path))
    found = files.read()
    assert sorted(f.name for f in found) == ["0", UUID0]
    assert {f.holder for f in found} == {JobHolder("11", "1001")}
    assert files.take_errors() == 0


def test_a_missing_directory_is_no_allocation_and_no_error(tmp_path: Path) -> None:
    files = AllocationFiles(str(tmp_path / "gpustat"))
    assert files.read() == ()
    assert files.take_errors() == 0
    (tmp_path / "gpustat").mkdir()
    _write(tmp_path / "gpustat", "2", "7 0")
    assert [f.name for f in files.read()] == ["2"]


def test_a_path_that_is_no_directory_is_counted_once(tmp_path: Path) -> None:
    target = tmp_path / "gpustat"
    target.write_text("a file")
    files = AllocationFiles(str(target))
    assert files.read() == ()
    assert files.read() == ()
    assert files.take_errors() == 1
    target.unlink()
    target.mkdir()
    _write(target, "0", "5")
    assert [f.holder for f in files.read()] == [JobHolder("5", "")]


def test_hostile_files_are_refused_once_per_change(tmp_path: Path) -> None:
    _write(tmp_path, "0", "not a job")
    (tmp_path / "secret").write_text("913377 2001")
    os.symlink(tmp_path / "secret", tmp_path / "1")  # a link: refused, never followed
    os.mkfifo(tmp_path / "2")  # a FIFO: refused without being opened (it would block)
    _write(tmp_path, "3", "9" * 300)  # larger than the limit
    os.mkdir(tmp_path / "4")
    _write(tmp_path, "5", "42 1000")
    files = AllocationFiles(str(tmp_path))
    assert [f.name for f in files.read()] == ["5"]
    assert files.take_errors() == 5
    assert [f.name for f in files.read()] == ["5"]
    assert files.take_errors() == 0  # unchanged files are not read (nor counted) again
    _write(tmp_path, "0", "43 1000")  # the prolog rewrites it in place
    assert sorted(f.name for f in files.read()) == ["0", "5"]


def test_files_of_other_owners_are_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a file another owner")
    _write(tmp_path, "0", "42 1000")
    os.chown(tmp_path / "0", 1000, 1000)
    files = AllocationFiles(str(tmp_path))
    assert files.read() == ()
    assert files.take_errors() == 1


def test_too_many_entries_stop_the_listing(tmp_path: Path) -> None:
    for index in range(12):
        _write(tmp_path, str(index), f"{index + 1} 0")
    files = AllocationFiles(str(tmp_path), max_entries=5)
    assert len(files.read()) == 5
    assert files.take_errors() == 1


def test_the_directory_is_listed_again_only_when_it_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, "0", "1 0")
    files = AllocationFiles(str(tmp_path))
    listings = []
    real = os.scandir

    def counting(path: str) -> object:
        listings.append(path)
        return real(path)

    monkeypatch.setattr(os, "scandir", counting)
    for _ in range(3):
        assert len(files.read()) == 1
    assert len(listings) == 1
    (tmp_path / "0").unlink()  # the epilog removes it: the directory's mtime changes
    os.utime(tmp_path, ns=(1, 1))  # (in case this filesystem's mtime is coarse)
    assert files.read() == ()
    assert len(listings) == 2


def _gpus() -> tuple:
    mig = MigDevice(gpu_instance=7, compute_instance=0, uuid=MIG, profile="1g.18gb")
    return (f.reading(0), f.reading(1), replace(f.reading(2), mig=(mig,)))


def _file(name: str, job: str, uid: str = "2001") -> AllocationFile:
    device = parse_name(name)
    assert device is not None
    return AllocationFile(name, device, JobHolder(job, uid))


def test_join_with_the_gpus_uuid_files_win() -> None:
    gpus = _gpus()
    uuid1 = gpus[1].identity.uuid
    rows = join_slurm_allocations(
        [_file("0", "11"), _file(gpus[0].identity.uuid, "11"),
         _file("1", "99"), _file(uuid1, "12"),  # a stale index file: the UUID file wins
         _file(MIG, "13"), _file("2.9", "14"), _file("7", "15", ""), _file(UUID0, "16")],
        gpus, {2001: "alice"}.get)
    got = [(r.gpu, r.uuid, r.device_id, r.gpu_instance, r.slurm_job, r.user, r.uid)
           for r in rows]
    assert got == [
        ("0", gpus[0].identity.uuid, gpus[0].identity.uuid, "", "11", "alice", "2001"),
        ("1", uuid1, uuid1, "", "12", "alice", "2001"),
        ("2", gpus[2].identity.uuid, MIG, "7", "13", "alice", "2001"),
        ("", "", "2.9", "9", "14", "alice", "2001"),  # an instance the source did not read
        ("", "", "7", "", "15", "", ""),  # no GPU 7 here: kept, never dropped
        ("", "", UUID0, "", "16", "alice", "2001"),
    ]
    assert {r.resource for r in rows} == {"gres/gpu"}
    assert {r.sharing for r in rows} == {"exclusive"}


def test_the_enricher_adds_rows_after_the_kubelets_and_counts_errors(tmp_path: Path) -> None:
    _write(tmp_path, "0", "11 0")
    _write(tmp_path, "1", "junk")
    snapshot = replace(f.fleet(2, 1), source="nvml")
    enricher = SlurmAllocations(AllocationFiles(str(tmp_path)), {0: "root"}.get)
    out = enricher.enrich(snapshot)
    assert out.allocations[: len(snapshot.allocations)] == snapshot.allocations
    added = out.allocations[len(snapshot.allocations):]
    assert [(r.gpu, r.slurm_job, r.user) for r in added] == [("0", "11", "root")]
    assert out.errors[ERROR_KIND] == 1
    assert enricher.enrich(snapshot).errors.get(ERROR_KIND) is None  # counted once
    simulated = Snapshot(source="simulated", hostname="h", taken_at=0.0, duration_seconds=0.0)
    assert enricher.enrich(simulated) is simulated
