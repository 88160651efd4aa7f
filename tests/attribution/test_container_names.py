"""Tests for exporter.attribution.container_names: names from Docker's and Podman's files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from exporter.attribution.container_names import ContainerNames
from tests.fixtures.cgroups import CID_A, CID_B, CID_C
from tests.scheduler_fakes import FakeClock


def write_docker(root: Path, container_id: str, name: str) -> Path:
    """``<root>/containers/<id>/config.v2.json`` shaped like moby's Container record."""
    path = root / "containers" / container_id / "config.v2.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "ID": container_id, "Name": f"/{name}", "Created": "2026-12-02T19:00:00Z",
        "Config": {"Image": "pytorch/pytorch:2.11", "Labels": {}, "Env": ["A=1"]},
        "State": {"Running": True, "Pid": 4242},
    }))
    return path


def write_podman(storage: Path, entries: list[tuple[str, str]]) -> Path:
    path = storage / "overlay-containers" / "containers.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([
        {"id": cid, "names": [name], "image": "f00", "layer": "b4r", "metadata": "{}"}
        for cid, name in entries
    ]))
    return path


@pytest.fixture
def names(tmp_path: Path) -> tuple[ContainerNames, FakeClock]:
    clock = FakeClock()
    return ContainerNames(docker_root=str(tmp_path / "docker"),
                          podman_storage=str(tmp_path / "storage"), clock=clock), clock


def test_docker_name_from_config(tmp_path: Path, names: tuple[ContainerNames, FakeClock]) -> None:
    resolver, _ = names
    write_docker(tmp_path / "docker", CID_A, "llm-train")
    assert resolver.name("docker", CID_A) == "llm-train"
    assert resolver.name("docker", CID_B) is None  # no file: not an error
    assert resolver.name("podman", CID_A) is None  # wrong runtime
    assert resolver.name(None, CID_A) is None
    assert resolver.take_errors() == {}


def test_docker_rename_is_seen_after_the_recheck_interval(
    tmp_path: Path, names: tuple[ContainerNames, FakeClock]
) -> None:
    resolver, clock = names
    path = write_docker(tmp_path / "docker", CID_A, "old")
    assert resolver.name("docker", CID_A) == "old"
    write_docker(tmp_path / "docker", CID_A, "new")
    os.utime(path, ns=(1, 10**18))  # a distinct mtime even on coarse filesystems
    assert resolver.name("docker", CID_A) == "old"  # cached inside the interval
    clock.now += 11
    assert resolver.name("docker", CID_A) == "new"


def test_malformed_and_oversized_files_are_counted(
    tmp_path: Path, names: tuple[ContainerNames, FakeClock]
) -> None:
    resolver, _ = names
    path = write_docker(tmp_path / "docker", CID_A, "x")
    path.write_text("{not json")
    assert resolver.name("docker", CID_A) is None
    small = ContainerNames(docker_root=str(tmp_path / "docker"), max_file_bytes=64)
    write_docker(tmp_path / "docker", CID_B, "y" * 200)
    assert small.name("docker", CID_B) is None
    assert resolver.take_errors() == {"container_name": 1}
    assert small.take_errors() == {"container_name": 1}


def test_podman_names_from_containers_json(
    tmp_path: Path, names: tuple[ContainerNames, FakeClock]
) -> None:
    resolver, clock = names
    path = write_podman(tmp_path / "storage", [(CID_A, "notebook"), (CID_B, "infer")])
    assert resolver.name("podman", CID_A) == "notebook"
    assert resolver.name("podman", CID_C) is None
    write_podman(tmp_path / "storage", [(CID_C, "late")])
    os.utime(path, ns=(1, 10**18))
    clock.now += 11
    assert resolver.name("podman", CID_C) == "late"
    assert resolver.name("podman", CID_A) is None
    assert resolver.take_errors() == {}


def test_disabled_roots(tmp_path: Path) -> None:
    write_docker(tmp_path / "docker", CID_A, "x")
    resolver = ContainerNames(docker_root=None, podman_storage=None)
    assert resolver.name("docker", CID_A) is None


def test_a_runtime_file_that_is_a_fifo_is_counted_and_logged_not_read(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "docker" / "containers" / CID_A / "config.v2.json"
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    names = ContainerNames(docker_root=str(tmp_path / "docker"), podman_storage=None)
    assert names.name("docker", CID_A) is None  # would block forever with a plain open()
    assert names.take_errors() == {"container_name": 1}
    assert "is a FIFO, not a regular file" in caplog.text
