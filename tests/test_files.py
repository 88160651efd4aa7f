"""exporter.files: every kind of path a user can name is read, or refused at once."""

from __future__ import annotations

import errno
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter import files
from exporter.files import FileRefused, describe, read_file, read_file_stat, read_small


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        yield path


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    path.write_bytes(b"root:x:0:0::/:/bin/sh\n" * 1000)
    data, info = read_file_stat(str(path), 1 << 20)
    assert data == path.read_bytes()
    assert info.st_size == len(data)


def test_procfs_files_of_size_zero_are_read(tmp_path: Path) -> None:
    assert b"btime" in read_file("/proc/stat", 1 << 20)


@pytest.mark.parametrize(("kind", "message"), [
    ("fifo", "is a FIFO, not a regular file"),
    ("unix_socket", "is a socket, not a regular file"),
])
def test_fifos_and_sockets_are_refused_without_blocking(
        kind: str, message: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(kind)
    begin = time.monotonic()
    with pytest.raises(FileRefused, match=message):
        read_file(str(path), 1024)
    assert time.monotonic() - begin < 10  # a blocking open or read would never return


def test_devices_are_refused_unopened() -> None:
    with pytest.raises(FileRefused, match="is a character device"):
        read_file("/dev/zero", 1024)


def test_directories_raise_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError) as info:
        read_file(str(tmp_path), 1024)
    assert describe(info.value) == "Is a directory"


def test_symlink_loops_and_dangling_links_fail_as_the_system_says(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(OSError, match="Too many levels of symbolic links") as info:
        read_file(str(tmp_path / "a"), 1024)
    assert info.value.errno == errno.ELOOP
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError):
        read_file(str(tmp_path / "dangling"), 1024)


def test_links_are_followed_unless_asked_not_to(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"data")
    link = tmp_path / "link"
    link.symlink_to(target)
    assert read_file(str(link), 1024) == b"data"  # a Kubernetes Secret is links all the way
    with pytest.raises(FileRefused, match="is a symbolic link"):
        read_file(str(link), 1024, follow_symlinks=False)


def test_a_sparse_file_of_gigabytes_is_refused_unread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "huge"
    with path.open("wb") as handle:
        handle.truncate(4 << 30)  # 4 GiB, no disk used
    def never(*args: object) -> bytes:
        raise AssertionError("read before the size was checked")

    monkeypatch.setattr(files.os, "read", never)
    with pytest.raises(FileRefused, match=r"is 4\.0 GiB, larger than the 1\.0 MiB limit"):
        read_file(str(path), 1 << 20)


def test_a_file_swapped_for_a_fifo_after_the_stat_is_caught_by_fstat(
        fifo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    regular = tmp_path / "regular"
    regular.write_bytes(b"x")
    real_stat = os.stat
    monkeypatch.setattr(files.os, "stat", lambda path, **kw: real_stat(regular, **kw))
    begin = time.monotonic()
    with pytest.raises(FileRefused, match="is a FIFO"):
        read_file(str(fifo), 1024)  # opened non-blocking: no writer needed to get here
    assert time.monotonic() - begin < 10  # a blocking open or read would never return


def test_a_file_growing_past_the_bound_while_read_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "growing"
    path.write_bytes(b"x" * 100)
    real_read = files._read_to_end

    def grow_then_read(fd: int, limit: int) -> bytes:
        with path.open("ab") as handle:
            handle.write(b"y" * 1000)
        return real_read(fd, limit)

    monkeypatch.setattr(files, "_read_to_end", grow_then_read)
    with pytest.raises(FileRefused, match="grew past the 200 bytes limit"):
        read_file(str(path), 200)


def test_a_file_changing_while_read_is_read_again_then_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "rewritten"
    path.write_bytes(b"one")
    reads = []
    real_read = files._read_to_end

    def rewrite_after(fd: int, limit: int) -> bytes:
        data = real_read(fd, limit)
        reads.append(data)
        if len(reads) < changes:
            path.write_bytes(b"two" * len(reads))  # a writer that is not done yet
        return data

    monkeypatch.setattr(files, "_read_to_end", rewrite_after)
    changes = 2  # changed once while read: the second read is consistent
    assert read_file(str(path), 1024) == b"two"
    reads.clear()
    changes = files.ATTEMPTS + 1  # never settles
    with pytest.raises(FileRefused, match="changed while being read, 3 times in a row"):
        read_file(str(path), 1024)
    assert len(reads) == files.ATTEMPTS


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_file_raises_permission_error(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_bytes(b"x")
    path.chmod(0)
    with pytest.raises(PermissionError):
        read_file(str(path), 1024)


def test_read_small_never_blocks_on_a_fifo(fifo: Path) -> None:
    begin = time.monotonic()
    assert read_small(str(fifo)) == b""  # no writer: end of file at once
    held = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # so that a writer can open it
    writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # a writer that writes nothing
    try:
        with pytest.raises(BlockingIOError):
            read_small(str(fifo))
    finally:
        os.close(writer)
        os.close(held)
    assert time.monotonic() - begin < 10  # a blocking open or read would never return


def test_read_small_reads_one_bounded_chunk() -> None:
    assert len(read_small("/dev/zero", 100)) == 100
    assert read_small("/proc/self/stat").startswith(str(os.getpid()).encode())


def test_describe_gives_the_reason_only() -> None:
    assert describe(FileNotFoundError(errno.ENOENT, "No such file or directory", "/x")) == (
        "No such file or directory")
    assert describe(FileRefused("is a FIFO, not a regular file")) == (
        "is a FIFO, not a regular file")
