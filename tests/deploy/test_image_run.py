"""docker/Dockerfile built with buildah and the image run with runc, the way users run it.

How (tests/deploy/image.py): a base made from Debian's packages through the Dockerfile's
PYTHON_IMAGE argument; containers with the image's own entrypoint and user, and the Helm
chart's securityContext (read-only root filesystem, no capabilities, no new privileges).
The build prints its time and the image's size, layer by layer.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from exporter import __version__
from exporter.catalogue.metrics import GPU_UP
from tests.deploy.declared import declared_files, declared_scripts
from tests.deploy.image import (
    BASE_ENV,
    BASE_IMAGE,
    EXPORT_ENV,
    IMAGE,
    NAME_ENV,
    Buildah,
    Image,
    Runc,
    archive_manifest,
    base_rootfs,
    oci_spec,
    scratch,
    unavailable,
    user_ids,
)
from tests.processes import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
if reason := unavailable():
    pytest.skip(reason, allow_module_level=True)

MB = 1_000_000
#: The goal is an image of at most 200 MB on python:3.12-slim, roughly 125 MB unpacked (not
#: measured here: it cannot be pulled): what the Dockerfile adds stays within the rest.
ADDED_BUDGET = 75 * MB
LISTEN = "GPU_EXPORTER_WEB_LISTEN_ADDRESS"
NOBODY = (65534, 65534)
#: Inside a container: whether / and /tmp take a new file, and who is asking.
WRITE_PROBE = """
import os
for path in ("/probe", "/tmp/probe"):
    try:
        open(path, "w").close()
        print(path, "written")
    except OSError as err:
        print(path, os.strerror(err.errno))
print("uid", os.getuid(), os.getgid())
"""
#: Inside a container: what the installed distribution holds and whether its scripts load.
DISTRIBUTION = """
import importlib.metadata, json, shutil
dist = importlib.metadata.distribution("gpu-exporter")
scripts = [e for e in dist.entry_points if e.group == "console_scripts"]
for script in scripts:
    script.load()
print(json.dumps({"files": [f.as_posix() for f in dist.files or []],
                  "scripts": {e.name: e.value for e in scripts},
                  "paths": {e.name: shutil.which(e.name) for e in scripts}}))
"""


@dataclass(frozen=True)
class Built:
    root: Path
    buildah: Buildah
    base: Image
    image: Image
    #: The image as a docker-archive, named GPU_EXPORTER_IMAGE_NAME (default: IMAGE).
    archive: Path


def _say(request: pytest.FixtureRequest, line: str) -> None:
    """A line on the terminal, whatever pytest captures."""
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)


def _skip(request: pytest.FixtureRequest, reason: str) -> NoReturn:
    """Skip every test of the fixture, saying why once on the terminal."""
    _say(request, f"\nimage tests skipped: {reason}")
    pytest.skip(reason)


def _mb(size: int) -> str:
    return f"{size / MB:.1f} MB"


@pytest.fixture(scope="module")
def built(request: pytest.FixtureRequest) -> Iterator[Built]:
    """The image, built on the base ``GPU_EXPORTER_IMAGE_BASE`` names (a registry's Python
    image, pulled; unset: one made from Debian's packages) and, for scripts/release, exported
    to the archive ``GPU_EXPORTER_IMAGE_EXPORT`` as ``GPU_EXPORTER_IMAGE_NAME``."""
    started = time.monotonic()
    base_name = os.environ.get(BASE_ENV) or BASE_IMAGE
    with scratch() as root:
        buildah = Buildah(root)
        if base_name == BASE_IMAGE:
            tarball, cached = base_rootfs()
            origin = ("Debian bookworm minbase + python3, pip; rootfs "
                      f"{'cached' if cached else f'made in {time.monotonic() - started:.1f} s'}")
            buildah.import_base(tarball)
        else:
            buildah.pull_base(base_name)
            origin = "pulled"
        problem = buildah.check_run(base_name)
        if problem:
            _skip(request, f"buildah cannot run a container on this machine: {problem}")
        build_started = time.monotonic()
        image = buildah.build(base_name)
        build_seconds = time.monotonic() - build_started
        base = buildah.inspect(base_name)
        added = image.layers[len(base.layers):]
        _say(request, (
            f"\nimage {IMAGE}: {_mb(image.size)} = base {base_name} {_mb(base.size)} "
            f"({origin}) + {len(added)} layer(s) of the Dockerfile: "
            f"{', '.join(_mb(size) for _, size in added)}; buildah bud {build_seconds:.1f} s, "
            f"{build_started - started:.1f} s before it"))
        # What scripts/release ships: the image as a docker-archive (docker load, skopeo copy).
        archive = Path(os.environ.get(EXPORT_ENV) or root / "image.tar")
        export_started = time.monotonic()
        buildah.export(IMAGE, archive, os.environ.get(NAME_ENV) or IMAGE)
        _say(request, f"exported to {archive} in {time.monotonic() - export_started:.1f} s")
        yield Built(root, buildah, base, image, archive)
    _say(request, f"\nimage tests: {time.monotonic() - started:.1f} s in all")


@dataclass(frozen=True)
class Runner:
    runc: Runc
    rootfs: Path
    image: Image


@pytest.fixture(scope="module")
def runner(request: pytest.FixtureRequest, built: Built) -> Iterator[Runner]:
    runc = Runc(built.root / "runc")
    # The base's own python, nothing of the Dockerfile's: a failure is this machine's.
    with built.buildah.rootfs(built.base.name) as base_rootfs_dir:
        probe = runc.run(oci_spec(base_rootfs_dir, built.base, ["-c", "pass"],
                                  entrypoint=["python3"]))
    if probe.returncode != 0:
        lines = (probe.stderr.strip() or f"exit {probe.returncode}").splitlines()
        _skip(request, f"runc cannot run a container on this machine: {lines[-1]}")
    with built.buildah.rootfs(IMAGE) as rootfs:
        yield Runner(runc, rootfs, built.image)


def _get(port: int, path: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return response.status, response.headers["Content-Type"], response.read().decode()


def _proc_status(pid: int) -> dict[str, list[str]]:
    lines = Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines()
    return {key: value.split() for key, _, value in (line.partition(":") for line in lines)}


def _root_mount_options(pid: int) -> list[str]:
    for line in Path(f"/proc/{pid}/mountinfo").read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if fields[4] == "/":
            return fields[5].split(",")
    raise AssertionError(f"no root mount in /proc/{pid}/mountinfo")


def test_image_config_labels_and_layers(built: Built) -> None:
    image, base = built.image, built.base
    config = image.config
    assert config["Entrypoint"] == ["gpu-exporter"]
    assert user_ids(config["User"]) == NOBODY
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.base.name"] == base.name
    assert image.healthcheck["Test"][:2] == ["CMD", "python"]
    # One layer on top of the base's (the pins and the wheel, as docs/deploy.md lists them);
    # the builder stage leaves nothing behind.
    assert image.layers[:len(base.layers)] == base.layers
    added = image.layers[len(base.layers):]
    assert len(added) == 1
    assert added[0][1] <= ADDED_BUDGET, f"the Dockerfile adds {_mb(added[0][1])} to its base"


def test_exported_archive_holds_the_image_under_its_name(built: Built) -> None:
    names, config = archive_manifest(built.archive)
    assert names == [os.environ.get(NAME_ENV) or IMAGE]
    assert config["config"]["Labels"]["org.opencontainers.image.version"] == __version__
    assert config["config"]["Entrypoint"] == built.image.config["Entrypoint"]
    assert config["config"]["Healthcheck"]["Test"] == built.image.healthcheck["Test"]
    assert len(config["rootfs"]["diff_ids"]) == len(built.image.layers)


def test_image_holds_every_declared_package_and_script(runner: Runner) -> None:
    result = runner.runc.run(oci_spec(runner.rootfs, runner.image, ["-c", DISTRIBUTION],
                                      entrypoint=["python"]))
    assert result.returncode == 0, result.stderr
    installed = json.loads(result.stdout)
    missing = declared_files() - set(installed["files"])
    assert not missing, f"the image lacks {sorted(missing)}"
    assert installed["scripts"] == declared_scripts()
    assert all(path and path.startswith("/usr/local/bin/")
               for path in installed["paths"].values()), installed["paths"]


def test_image_serves_as_nobody_on_a_read_only_root(runner: Runner) -> None:
    port = free_port()
    env = {LISTEN: f"127.0.0.1:{port}"}
    spec = oci_spec(runner.rootfs, runner.image, ["--source=simulated", "--scenario=calm"],
                    env=env)
    healthcheck = runner.image.healthcheck["Test"][1:]
    with runner.runc.start(spec, port) as (name, server):
        server.wait_until(lambda: _get(port, "/healthz")[0] == 200, "the exporter", 60)
        status, kind, metrics = _get(port, "/metrics")
        assert status == 200
        assert f"\n{GPU_UP.name}{{" in metrics
        status, _, ready = _get(port, "/readyz")
        assert status == 200
        assert json.loads(ready)["status"] == "ready"
        status, kind, page = _get(port, "/")
        assert (status, kind.split(";")[0]) == (200, "text/html")
        assert "<title>gpu-exporter on " in page
        assert __version__ in page

        # The entrypoint is the container's PID 1, as nobody, without capabilities.
        pid = runner.runc.pid(name)
        proc = _proc_status(pid)
        assert proc["NSpid"][-1] == "1"
        assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1] == \
            b"/usr/local/bin/gpu-exporter"
        assert proc["Uid"] == [str(NOBODY[0])] * 4
        assert proc["Gid"] == [str(NOBODY[1])] * 4
        assert int(proc["CapEff"][0], 16) == 0
        assert int(proc["CapBnd"][0], 16) == 0
        assert proc["NoNewPrivs"] == ["1"]
        assert "ro" in _root_mount_options(pid)
        probe = runner.runc.exec(name, ["python", "-c", WRITE_PROBE])
        assert probe.stdout.splitlines() == [
            "/probe Read-only file system", "/tmp/probe written", "uid 65534 65534"], probe

        # The image's HEALTHCHECK, run in the container as Docker does.
        check = runner.runc.exec(name, healthcheck)
        assert check.returncode == 0, check.stderr
    # ... and it fails once nothing answers (so the pass above means something).
    check_alone = runner.runc.run(oci_spec(runner.rootfs, runner.image, entrypoint=healthcheck,
                                           env=env))
    assert check_alone.returncode == 1, check_alone.stderr


def test_sigterm_stops_the_container_with_exit_0_within_5_s(runner: Runner) -> None:
    port = free_port()
    spec = oci_spec(runner.rootfs, runner.image, ["--source=simulated", "--scenario=calm"],
                    env={LISTEN: f"127.0.0.1:{port}"})
    with runner.runc.start(spec, port) as (name, server):
        server.wait_until(lambda: _get(port, "/readyz")[0] == 200, "the exporter", 60)
        started = time.monotonic()
        runner.runc.kill(name, "TERM")  # what docker stop and the kubelet send first
        code = server.proc.wait(timeout=5)
        elapsed = time.monotonic() - started
        server.stop()  # reads the rest of its log
        assert code == 0, server.log
        assert elapsed < 5
        assert "gpu-exporter stopped" in server.log


def test_gpu_exporter_run_works_in_the_image(runner: Runner) -> None:
    usage = runner.runc.run(oci_spec(runner.rootfs, runner.image, ["--help"],
                                     entrypoint=["gpu-exporter-run"]))
    assert usage.returncode == 0, usage.stderr
    assert usage.stdout.startswith("usage: gpu-exporter-run")
    # It runs a command with the publisher's start-up hook in front of it.
    show = ("import os, sys; "
            "print(os.environ['GPU_EXPORTER_TORCH'], sys.modules['sitecustomize'].__file__)")
    hooked = runner.runc.run(oci_spec(runner.rootfs, runner.image, ["python", "-c", show],
                                      entrypoint=["gpu-exporter-run"]))
    assert hooked.returncode == 0, hooked.stderr
    enabled, hook = hooked.stdout.split()
    assert enabled == "1"
    assert hook.startswith("/usr/local/lib/python3")
    assert hook.endswith("/gpu_exporter_torch/_hook/sitecustomize.py")
