"""docker/Dockerfile and docker/requirements.txt: pinned, slim, non-root, and installable.

The slow test replays the Dockerfile's own COPY and RUN steps (read from the file, with the
container paths mapped to a scratch directory) in a fresh venv, then runs the installed
``gpu-exporter`` and the image's HEALTHCHECK command against it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from exporter import __version__
from exporter.metrics import GPU_UP
from tests.deploy.dockerfile import Stage, exec_form, parse, split_run
from tests.deploy.stack import DOCKER, REPO
from tests.processes import free_port, stop_all

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

DOCKERFILE = DOCKER / "Dockerfile"
REQUIREMENTS = DOCKER / "requirements.txt"
IGNORE = DOCKER / "Dockerfile.dockerignore"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.+!-]*)$")


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in REQUIREMENTS.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = PIN.match(line.strip())
        assert match, f"requirements.txt: {line!r} is not an exact name==version pin"
        name = canonicalize_name(match.group(1))
        assert name not in pins, f"requirements.txt pins {name} twice"
        pins[name] = match.group(2)
    return pins


def _stages() -> tuple[Stage, Stage]:
    _, stages = parse(DOCKERFILE)
    assert len(stages) == 2, [s.name for s in stages]
    return stages[0], stages[1]


def _env(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in stage.all("ENV"):
        for word in shlex.split(instruction.args):
            key, _, value = word.partition("=")
            env[key] = value
    return env


def test_every_runtime_dependency_is_pinned_within_range() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    pins = _pins()
    dependencies = [Requirement(d) for d in pyproject["project"]["dependencies"]]
    assert dependencies
    for requirement in dependencies:
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is a runtime dependency but not pinned in requirements.txt"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{name}=={pins[name]} is outside pyproject's {requirement.specifier}")
    assert "gpu-exporter" not in pins


def test_both_stages_use_one_pinned_slim_python() -> None:
    builder, final = _stages()
    assert builder.name == "builder"
    assert builder.base == final.base
    assert re.fullmatch(r"python:3\.1[0-9]\.\d+-slim(-\w+)?", final.base), final.base


def test_final_stage_installs_the_wheel_with_pins_and_no_compilers() -> None:
    _, final = _stages()
    runs = [split_run(i) for i in final.all("RUN")]
    assert len(runs) == 1
    text = runs[0].command
    assert not re.search(r"apt-get|apk |gcc|build-essential|\bmake\b", text)
    assert "--no-deps -r /tmp/requirements.txt" in text
    assert re.search(r"pip install --no-deps /tmp/wheels/gpu_exporter-\*\.whl", text)
    assert text.endswith("python -m pip check")
    sources = {m["target"]: m for m in runs[0].mounts}
    assert sources["/tmp/requirements.txt"]["source"] == "docker/requirements.txt"
    assert sources["/tmp/wheels"]["from"] == "builder"
    assert final.all("COPY") == []  # nothing but the RUN mounts reaches the image


def test_final_stage_runtime_settings() -> None:
    args, _ = parse(DOCKERFILE)
    _, final = _stages()
    (user,) = final.all("USER")
    uid = user.args.split(":")[0]
    assert uid.isdigit()
    assert int(uid) != 0
    assert [i.args for i in final.all("EXPOSE")] == ["9477"]
    (entrypoint,) = final.all("ENTRYPOINT")
    assert exec_form(entrypoint.args) == ["gpu-exporter"]
    env = _env(final)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    (health,) = final.all("HEALTHCHECK")
    assert "/healthz" in health.args
    assert "curl" not in health.args
    assert "wget" not in health.args
    labels = " ".join(i.args for i in final.all("LABEL"))
    for key in ("title", "description", "version", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels
    version_arg = next(i.args for i in final.all("ARG") if i.args.startswith("VERSION="))
    assert version_arg == f"VERSION={__version__}"
    assert args["PYTHON_IMAGE"] == final.base


def test_dockerignore_keeps_what_the_build_copies() -> None:
    ignored = [line.strip() for line in IGNORE.read_text(encoding="utf-8").splitlines()
               if line.strip() and not line.startswith("#")]
    assert ".git" in ignored
    assert ".venv" in ignored
    builder, _ = _stages()
    copied = [w for i in builder.all("COPY") for w in shlex.split(i.args)[:-1]]
    assert {"pyproject.toml", "README.md", "exporter"} <= set(copied)
    for path in [*copied, "docker/requirements.txt"]:
        assert (REPO / path).exists(), path
        assert not any(path == p or path.startswith(p + "/") for p in ignored), path



def _replay_builder(builder: Stage, src: Path, paths: dict[str, Path], env: dict[str, str]
                    ) -> None:
    for instruction in builder.instructions:
        if instruction.keyword == "COPY":
            *sources, dest = shlex.split(instruction.args)
            for source in sources:
                target = src / dest / source if dest.endswith("/") else src / dest
                if (REPO / source).is_dir():
                    shutil.copytree(REPO / source, target,
                                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(REPO / source, target)
        elif instruction.keyword == "RUN":
            _run(split_run(instruction).command, paths, src, env)


def _run(command: str, paths: dict[str, Path], cwd: Path, env: dict[str, str]) -> None:
    # One pass, whole paths only (after a space or "="): /tmp/wheels must not become
    # /tmp<scratch>/wheels through the shorter /wheels.
    keys = sorted(paths, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w/.-])(" + "|".join(map(re.escape, keys)) + r")(?=[/\s]|$)")
    command = pattern.sub(lambda m: str(paths[m.group(1)]), command)
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


@pytest.mark.slow
def test_image_install_steps_work_in_a_fresh_venv(tmp_path: Path) -> None:
    started = time.monotonic()
    builder, final = _stages()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "VIRTUAL_ENV": str(venv), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    src = tmp_path / "src"
    src.mkdir()
    (run,) = [split_run(i) for i in final.all("RUN")]
    paths: dict[str, Path] = {}
    for mount in run.mounts:
        if mount.get("from") == "builder":
            paths[mount["source"]] = paths[mount["target"]] = tmp_path / "wheels"
        else:
            paths[mount["target"]] = REPO / mount["source"]
    _replay_builder(builder, src, paths, env)
    wheels = list((tmp_path / "wheels").glob("gpu_exporter-*.whl"))
    assert [w.name for w in wheels] == [f"gpu_exporter-{__version__}-py3-none-any.whl"]
    _run(run.command, paths, tmp_path, env)

    exe = venv / "bin" / "gpu-exporter"
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True,
                             timeout=30, check=True, cwd=tmp_path, env=env)
    assert version.stdout.strip() == f"gpu-exporter {__version__}"

    port = free_port()
    run_env = {**env, "GPU_EXPORTER_WEB_LISTEN_ADDRESS": f"127.0.0.1:{port}"}
    proc = subprocess.Popen([str(exe), "--source=simulated", "--scenario=calm"], cwd=tmp_path,
                            env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, proc.communicate()[0].decode(errors="replace")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline, "no /healthz answer within 20 s"
                time.sleep(0.2)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            assert f"\n{GPU_UP.name}{{" in r.read().decode()
        # The image's HEALTHCHECK command, run by the venv's python as the image would.
        (health,) = final.all("HEALTHCHECK")
        argv = exec_form(health.args.split(" CMD ", 1)[1])
        assert argv[0] == "python"
        check = subprocess.run([str(venv / "bin" / "python"), *argv[1:]], env=run_env,
                               capture_output=True, text=True, timeout=30, check=False)
        assert check.returncode == 0, check.stderr
    finally:
        stop_all([proc], timeout=10)
    # The same HEALTHCHECK fails once nothing listens (so the pass above means something).
    check = subprocess.run([str(venv / "bin" / "python"), *argv[1:]], env=run_env,
                           capture_output=True, text=True, timeout=30, check=False)
    assert check.returncode != 0
    assert time.monotonic() - started < 120
