"""Tests for attribution.passwd: parsing, start-up validation, change detection at runtime."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from exporter.attribution import passwd
from exporter.attribution.passwd import PasswdFile, PasswdFileError, check_passwd_file, parse_passwd
from tests.scheduler_fakes import FakeClock

FIXTURE = Path(__file__).parent.parent / "fixtures" / "host_passwd"


def test_parse_fixture_skips_malformed_lines_and_keeps_first_duplicate() -> None:
    users = parse_passwd(FIXTURE.read_text())
    assert users == {0: "root", 1: "daemon", 1001: "alice", 1002: "bob", 998: "nvidia-persistenced"}


def test_parse_never_raises_on_binary_garbage() -> None:
    assert parse_passwd("\x00\xff:::\n::::\n" * 10) == {}
    assert parse_passwd("sup:x:\u00b2:0::/:/bin/sh\nbig:x:4294967294:0::/:/bin/sh\n") == {
        4294967294: "big"  # a unicode digit is not a uid; nobody-style large uids are
    }


def test_check_accepts_a_real_passwd_file() -> None:
    check_passwd_file(str(FIXTURE))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, "not found"),
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: p.write_text(""), "no valid"),
        (lambda p: p.write_text("just some text\nwith lines\n"), "no valid"),
    ],
)
def test_check_rejects_unusable_files(tmp_path: Path, make: object, message: str) -> None:
    path = tmp_path / "passwd"
    make(path)  # type: ignore[operator]
    with pytest.raises(PasswdFileError, match=message) as info:
        check_passwd_file(str(path))
    assert str(path) in str(info.value)
    assert isinstance(info.value, ValueError)  # the CLI catches ValueError for exit status 2


def test_check_rejects_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(path: str) -> dict[int, str]:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(passwd, "_read_passwd", denied)
    with pytest.raises(PasswdFileError, match="permission denied"):
        check_passwd_file(str(tmp_path / "passwd"))


def test_check_rejects_oversized_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "passwd"
    path.write_text("root:x:0:0::/:/bin/sh\n" * 10)
    monkeypatch.setattr(passwd, "MAX_PASSWD_BYTES", 50)
    with pytest.raises(PasswdFileError, match="larger than"):
        check_passwd_file(str(path))


def test_name_falls_back_to_uid(tmp_path: Path) -> None:
    db = PasswdFile(str(FIXTURE))
    assert db.name(1001) == "alice"
    assert db.name(833617920) == "833617920"  # user-namespace host uid: no entry anywhere
    assert db.take_errors() == 0


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths passwd files are read from (every read, counted)."""
    paths: list[str] = []
    real_read = passwd._read_passwd

    def counting(p: str) -> dict[int, str]:
        paths.append(p)
        return real_read(p)

    monkeypatch.setattr(passwd, "_read_passwd", counting)
    return paths


def test_reread_only_when_changed(tmp_path: Path, reads: list[str]) -> None:
    path = tmp_path / "passwd"
    shutil.copy(FIXTURE, path)
    clock = FakeClock(1000.0)
    db = PasswdFile(str(path), check_interval=1.0, clock=clock)
    assert db.name(1002) == "bob"
    for _ in range(5):  # unchanged file: stat only, no re-read
        clock.now += 2
        assert db.name(1002) == "bob"
    assert len(reads) == 1
    generation = db.generation

    with path.open("a") as handle:
        handle.write("carol:x:1003:1003::/home/carol:/bin/bash\n")
    assert db.name(1003) == "1003"  # within the check interval: not looked at yet
    clock.now += 1.5
    assert db.name(1003) == "carol"
    assert len(reads) == 2
    assert db.generation == generation + 1


def test_same_size_rewrite_is_detected_by_mtime(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    path.write_text("alice:x:1001:1001::/:/bin/sh\n")
    clock = FakeClock(1000.0)
    db = PasswdFile(str(path), clock=clock)
    assert db.name(1001) == "alice"
    path.write_text("alicf:x:1001:1001::/:/bin/sh\n")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    clock.now += 5
    assert db.name(1001) == "alicf"


def test_missing_at_runtime_gives_numeric_names_and_counts(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    shutil.copy(FIXTURE, path)
    clock = FakeClock(1000.0)
    db = PasswdFile(str(path), clock=clock)
    assert db.name(1001) == "alice"
    path.unlink()
    clock.now += 5
    assert db.name(1001) == "1001"
    clock.now += 5
    db.refresh()
    assert db.take_errors() == 2  # one per failed check
    assert db.take_errors() == 0
    shutil.copy(FIXTURE, path)  # comes back: names come back
    clock.now += 5
    assert db.name(1001) == "alice"
    assert db.take_errors() == 0


def test_missing_from_the_start_never_raises(tmp_path: Path) -> None:
    db = PasswdFile(str(tmp_path / "nope"))
    assert db.name(0) == "0"
    assert db.take_errors() == 1


def test_a_fifo_or_huge_file_is_refused_at_start_and_counted_at_run_time(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "passwd"
    os.mkfifo(path)
    with pytest.raises(PasswdFileError, match="is a FIFO, not a regular file"):
        check_passwd_file(str(path))
    clock = FakeClock(1000.0)
    db = PasswdFile(str(path), clock=clock)
    assert db.name(0) == "0"  # no blocking open
    path.unlink()
    with path.open("wb") as handle:
        handle.truncate(passwd.MAX_PASSWD_BYTES + 1)
    clock.now += 5
    assert db.name(0) == "0"
    assert db.take_errors() == 2
    warnings = [r for r in caplog.records if "cannot be read" in r.getMessage()]
    assert len(warnings) == 1  # once while it stays bad
    assert "is a FIFO" in warnings[0].getMessage()


def test_request_reload_rereads_an_unchanged_file_at_once(
        tmp_path: Path, reads: list[str]) -> None:
    path = tmp_path / "passwd"
    shutil.copy(FIXTURE, path)
    clock = FakeClock(1000.0)
    db = PasswdFile(str(path), check_interval=60.0, clock=clock)
    assert db.name(1001) == "alice"
    assert db.name(1001) == "alice"
    assert len(reads) == 1
    passwd.request_reload()
    assert db.name(1001) == "alice"  # within the interval and unchanged, yet read again
    assert len(reads) == 2
