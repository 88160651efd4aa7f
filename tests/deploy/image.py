"""The image as users meet it: buildah builds docker/Dockerfile, runc runs what it built.

Docker Hub cannot be reached from the test machines, so the base that goes through the
Dockerfile's ``PYTHON_IMAGE`` argument is made here from Debian's packages: mmdebstrap's
minbase with python3 and pip, one layer with the official python image's ``PATH`` and
``LANG``. Its root filesystem is cached as a tarball (``cache_dir()``); the image store is a
scratch directory (vfs driver, chroot isolation, as root) removed afterwards.

A container runs the way Docker and Kubernetes run one, by runc (their runtime), from an OCI
bundle written from the image's config (entrypoint, environment, working directory, user)
plus the Helm chart's securityContext: read-only root filesystem, no capabilities, no new
privileges, and a tmpfs on /tmp (the chart's emptyDir, compose's ``tmpfs``). It has its own
PID namespace (the entrypoint is PID 1) and the host's network (tests bind 127.0.0.1).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.stack import DOCKER, REPO
from tests.processes import LoggedServer, last_line

DOCKERFILE = DOCKER / "Dockerfile"
IGNORE_FILE = DOCKER / "Dockerfile.dockerignore"
CHART_VALUES = REPO / "helm" / "gpu-exporter" / "values.yaml"
IMAGE = "localhost/gpu-exporter:test"
BASE_IMAGE = "localhost/debian-python:bookworm"
#: Set by scripts/release: the base to build on (default BASE_IMAGE, made here), and where and
#: under which name test_image_run.py exports the image it tested.
BASE_ENV = "GPU_EXPORTER_IMAGE_BASE"
EXPORT_ENV = "GPU_EXPORTER_IMAGE_EXPORT"
NAME_ENV = "GPU_EXPORTER_IMAGE_NAME"
TOOLS = ("buildah", "mmdebstrap", "runc")
#: The trust store pip inside the build uses to reach PyPI: this machine's, whatever it trusts.
TRUST_STORE = Path("/etc/ssl/certs/ca-certificates.crt")
_SUITE = "bookworm"
_MIRRORS = (
    f"deb http://deb.debian.org/debian {_SUITE} main",
    f"deb http://deb.debian.org/debian {_SUITE}-updates main",
    f"deb http://deb.debian.org/debian-security {_SUITE}-security main",
)
#: What the official slim image leaves out too: documentation, manual pages, translations.
_PATH_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*",
                  "/usr/share/locale/*")
_BASE_CONFIG = ("--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--env", "LANG=C.UTF-8", "--cmd", "python3")


class CommandFailed(RuntimeError):
    """A build tool exited non-zero; the message holds its command line and output."""


def _run(command: Sequence[str], timeout: float) -> str:
    result = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout,
                            check=False, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise CommandFailed(f"{shlex.join(command)} exited {result.returncode}:\n"
                            f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
    return result.stdout


def unavailable() -> str | None:
    """Why the image cannot be built and run on this machine, or None."""
    if os.geteuid() != 0:
        return "building and running the image needs root (buildah with chroot isolation, runc)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed (scripts/test installs them from Debian)"
    return None


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpu-exporter" / "image-base"


def _mmdebstrap(out: Path) -> list[str]:
    return [
        "mmdebstrap", "--quiet", "--variant=minbase", "--format=tar",
        "--include=python3,python3-pip,python-is-python3",
        # /bin -> /usr/bin without the usrmerge package (and the Perl it pulls in)
        "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
        # as this machine's own apt is set: its Debian mirror may serve a dated snapshot
        '--aptopt=Acquire::Check-Valid-Until "false"',
        *(f"--dpkgopt=path-exclude={pattern}" for pattern in _PATH_EXCLUDES),
        "--dpkgopt=path-include=/usr/share/doc/*/copyright",
        f"--customize-hook=copy-in {TRUST_STORE} /etc/ssl/certs/",
        # pip installs into the system's Python, as in the official image
        '--customize-hook=rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED',
        _SUITE, str(out), *_MIRRORS,
    ]


def base_rootfs() -> tuple[Path, bool]:
    """The base's root filesystem as a tarball, and whether it came from the cache.

    The cache key covers the mmdebstrap command and the trust store; a new key replaces the
    tarballs of older ones.
    """
    key = hashlib.sha256(json.dumps(_mmdebstrap(Path("-"))).encode() + TRUST_STORE.read_bytes())
    directory = cache_dir()
    tarball = directory / f"{_SUITE}-python3-{key.hexdigest()[:16]}.tar"
    if tarball.is_file():
        return tarball, True
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f"{tarball.name}.{os.getpid()}.partial"
    try:
        _run(_mmdebstrap(partial), timeout=600)
        for old in directory.glob(f"{_SUITE}-python3-*.tar"):
            old.unlink(missing_ok=True)
        partial.replace(tarball)  # atomic: a concurrent run sees a whole tarball or none
    finally:
        partial.unlink(missing_ok=True)
    return tarball, False


@dataclass(frozen=True)
class Image:
    name: str
    #: The OCI config (Entrypoint, Cmd, Env, User, WorkingDir, Labels).
    config: dict[str, Any]
    #: The Docker config's HEALTHCHECK ({"Test": [...], "Interval": ns, ...}).
    healthcheck: dict[str, Any]
    #: (digest, size of the uncompressed layer tarball), the base's layers first.
    layers: tuple[tuple[str, int], ...]

    @property
    def size(self) -> int:
        """What ``docker images`` reports: the layers unpacked."""
        return sum(size for _, size in self.layers)


class Buildah:
    """buildah on an image store of its own (vfs) under ``root``."""

    def __init__(self, root: Path) -> None:
        self._flags = ["--root", str(root / "storage"), "--runroot", str(root / "run"),
                       "--storage-driver", "vfs"]

    def __call__(self, *args: str, timeout: float = 300) -> str:
        return _run(["buildah", *self._flags, *args], timeout)

    def import_base(self, tarball: Path) -> None:
        """Commit ``tarball`` as ``BASE_IMAGE``, one layer, with the official image's PATH."""
        container = self("from", "scratch").strip()
        self("add", container, str(tarball), "/")
        self("config", *_BASE_CONFIG, container)
        self("commit", "--quiet", "--rm", container, BASE_IMAGE)

    def pull_base(self, reference: str) -> None:
        """Pull ``reference`` (a registry's Python image) into the store, to build on it."""
        self("pull", "--quiet", reference, timeout=600)

    def check_run(self, base: str = BASE_IMAGE) -> str | None:
        """Why buildah cannot run a command in a container of ``base`` here, or None. Only
        the base's files take part: a failure here is this machine's, never the Dockerfile's."""
        container = self("from", "--quiet", base).strip()
        try:
            self("run", "--isolation", "chroot", container, "--", "python3", "-c", "pass")
        except CommandFailed as err:
            return last_line(str(err))
        finally:
            self("rm", container)
        return None

    def build(self, base: str = BASE_IMAGE) -> Image:
        """docker/Dockerfile as it is; only its PYTHON_IMAGE argument names the base."""
        self("bud", "--isolation", "chroot", "--format", "docker", "--pull=never",
             "--build-arg", f"PYTHON_IMAGE={base}", "--ignorefile", str(IGNORE_FILE),
             "--file", str(DOCKERFILE), "--tag", IMAGE, str(REPO), timeout=600)
        return self.inspect(IMAGE)

    def export(self, image: str, archive: Path, name: str) -> None:
        """``image`` as a ``docker load``-able archive whose image is called ``name`` only
        (pushed by its id: pushed by name, the archive would carry that name too)."""
        image_id = self("images", "--quiet", image).strip()
        self("push", "--quiet", image_id, f"docker-archive:{archive}:{name}", timeout=600)

    def inspect(self, name: str) -> Image:
        data = json.loads(self("inspect", "--type", "image", name))
        manifest = json.loads(data["Manifest"])
        return Image(name=name, config=data["OCIv1"]["config"],
                     healthcheck=data["Docker"]["config"].get("Healthcheck") or {},
                     layers=tuple((layer["digest"], int(layer["size"]))
                                  for layer in manifest["layers"]))

    @contextmanager
    def rootfs(self, image: str) -> Iterator[Path]:
        """A container's root filesystem of ``image`` (a directory: vfs mounts nothing)."""
        container = self("from", "--quiet", image).strip()
        try:
            yield Path(self("mount", container).strip())
        finally:
            self("rm", container)


@contextmanager
def scratch() -> Iterator[Path]:
    """A directory for the image store and runc's state, removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="gpu-exporter-image-", dir="/var/tmp"))
    try:
        yield root
    finally:
        shutil.rmtree(root)


def chart_security_context() -> dict[str, Any]:
    """The exporter container's securityContext in the chart's default values."""
    values = yaml.safe_load(CHART_VALUES.read_text(encoding="utf-8"))
    context: dict[str, Any] = values["securityContext"]
    return context


def user_ids(user: str) -> tuple[int, int]:
    """``uid:gid`` of an image's USER (numeric; a name would need the image's passwd)."""
    uid, _, gid = user.partition(":")
    if not (uid.isdigit() and gid.isdigit()):
        raise ValueError(f"USER {user!r} is not numeric uid:gid")
    return int(uid), int(gid)


def oci_spec(rootfs: Path, image: Image, args: Sequence[str] | None = None, *,
             entrypoint: Sequence[str] | None = None, env: Mapping[str, str] | None = None
             ) -> dict[str, Any]:
    """An OCI runtime config that runs ``image`` as ``docker run [--entrypoint E] image
    [ARGS]`` would, hardened as the chart's securityContext says."""
    config = image.config
    if entrypoint is None:
        argv = [*(config.get("Entrypoint") or []), *(args or config.get("Cmd") or [])]
    else:  # --entrypoint drops the image's CMD too
        argv = [*entrypoint, *(args or [])]
    security = chart_security_context()
    uid, gid = user_ids(config.get("User") or "0:0")
    environment = dict(line.split("=", 1) for line in config.get("Env", []))
    environment.update(env or {})
    capabilities: list[str] = []
    if security["capabilities"]["drop"] != ["ALL"]:
        raise ValueError(f"the chart keeps capabilities: {security['capabilities']}")
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": uid, "gid": gid},
            "args": argv,
            "env": [f"{key}={value}" for key, value in environment.items()],
            "cwd": config.get("WorkingDir") or "/",
            "capabilities": {kind: capabilities for kind in
                             ("bounding", "effective", "inheritable", "permitted", "ambient")},
            "noNewPrivileges": not security["allowPrivilegeEscalation"],
        },
        "root": {"path": str(rootfs), "readonly": security["readOnlyRootFilesystem"]},
        "hostname": "gpu-exporter",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
             "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs",
             "options": ["nosuid", "noexec", "nodev", "ro"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "nodev", "mode=1777", "size=16m"]},
        ],
        "linux": {
            # no network namespace: the host's, so 127.0.0.1 is the test's loopback
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"},
                           {"type": "mount"}],
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list",
                            "/proc/sched_debug", "/sys/firmware"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                              "/proc/sysrq-trigger"],
        },
    }


class Runc:
    """runc with its state under ``root``; one bundle directory per container."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._count = 0
        root.mkdir(parents=True, exist_ok=True)

    def _prepare(self, spec: Mapping[str, Any]) -> tuple[str, list[str]]:
        self._count += 1
        name = f"gpu-exporter-test-{os.getpid()}-{self._count}"
        bundle = self._root / "bundles" / name
        bundle.mkdir(parents=True)
        (bundle / "config.json").write_text(json.dumps(spec), encoding="utf-8")
        return name, ["run", "--bundle", str(bundle), name]

    def command(self, *args: str) -> list[str]:
        return ["runc", "--root", str(self._root / "state"), *args]

    def run(self, spec: Mapping[str, Any], timeout: float = 60
            ) -> subprocess.CompletedProcess[str]:
        """Run a container to its end; its exit status and output."""
        name, args = self._prepare(spec)
        try:
            return subprocess.run(self.command(*args), capture_output=True, text=True,
                                  timeout=timeout, check=False, stdin=subprocess.DEVNULL)
        finally:
            self.delete(name)

    @contextmanager
    def start(self, spec: Mapping[str, Any], port: int) -> Iterator[tuple[str, LoggedServer]]:
        """A container left running (its name, and runc's process with the container's
        stderr), force-removed at the end."""
        name, args = self._prepare(spec)
        server = LoggedServer(self.command(*args), cwd=self._root, env=os.environ, port=port)
        try:
            yield name, server
        finally:
            try:
                subprocess.run(self.command("kill", name, "KILL"), capture_output=True,
                               timeout=30, check=False)
                server.stop(timeout=10)
            finally:
                self.delete(name)

    def pid(self, name: str) -> int:
        """The host pid of the container's first process."""
        state = json.loads(_run(self.command("state", name), timeout=30))
        return int(state["pid"])

    def exec(self, name: str, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """``argv`` inside the running container, with its process's user and environment
        (``docker exec``)."""
        return subprocess.run(self.command("exec", name, *argv), capture_output=True,
                              text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)

    def kill(self, name: str, signal: str) -> None:
        """``signal`` to the container's first process (``docker stop``, ``docker kill``)."""
        _run(self.command("kill", name, signal), timeout=30)

    def delete(self, name: str) -> None:
        subprocess.run(self.command("delete", "--force", name), capture_output=True,
                       timeout=30, check=False)


def archive_manifest(archive: Path) -> tuple[list[str], dict[str, Any]]:
    """The image names and the image config in a docker-archive (what ``docker load`` reads)."""
    with tarfile.open(archive) as tar:
        def member(name: str) -> Any:
            handle = tar.extractfile(name)
            if handle is None:
                raise ValueError(f"{archive}: {name} is not a file")
            return json.load(handle)
        (entry,) = member("manifest.json")
        config: dict[str, Any] = member(entry["Config"])
        return list(entry.get("RepoTags") or []), config
