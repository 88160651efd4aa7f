"""docker/Dockerfile and docker/requirements.txt: pinned, slim, non-root, and complete.

The slow test replays the builder stage's own COPY and RUN steps (read from the file, with the
container paths mapped to a scratch directory) and checks the wheel against pyproject.toml.
tests/deploy/test_image_run.py builds the image itself and runs it.
"""

from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from exporter import __version__
from tests.deploy.declared import declared_files, declared_scripts, pyproject, script_module_file
from tests.deploy.dockerfile import Stage, exec_form, parse, split_run
from tests.deploy.stack import DOCKER, REPO

DOCKERFILE = DOCKER / "Dockerfile"
REQUIREMENTS = DOCKER / "requirements.txt"
IGNORE = DOCKER / "Dockerfile.dockerignore"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.+!-]*)$")
VARIABLE = re.compile(r"\$\{?(\w+)")


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
    pins = _pins()
    dependencies = [Requirement(d) for d in pyproject()["project"]["dependencies"]]
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



def test_every_variable_a_stage_uses_is_declared_in_it() -> None:
    # A global ARG (before the first FROM) is visible to FROM lines only; a stage sees it
    # after an ``ARG NAME`` of its own. Undeclared, ${NAME} expands to "" without a warning.
    _, stages = parse(DOCKERFILE)
    for stage in stages:
        known = {"PATH", "HOME"}
        for instruction in stage.instructions:
            if instruction.keyword not in {"RUN", "HEALTHCHECK"}:
                used = set(VARIABLE.findall(instruction.args))
                assert used <= known, f"{stage.name or stage.base}: {instruction.keyword} " \
                    f"uses {sorted(used - known)} without an ARG or ENV before it"
            if instruction.keyword == "ARG":
                known.add(instruction.args.split("=")[0].strip())
            elif instruction.keyword == "ENV":
                known.update(w.partition("=")[0] for w in shlex.split(instruction.args))


def test_builder_copies_every_package_pyproject_declares() -> None:
    builder, _ = _stages()
    copied = {w.rstrip("/") for i in builder.all("COPY") for w in shlex.split(i.args)[:-1]}
    tops = {path.split("/")[0] for path in declared_files()}
    assert tops
    assert tops <= copied, f"the builder stage does not copy {sorted(tops - copied)}"



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


def build_wheel_as_the_image_does(tmp_path: Path) -> Path:
    """The builder stage's COPY and RUN steps, replayed in ``tmp_path``; the wheel it made."""
    builder, final = _stages()
    # ``python`` is the test's interpreter, as it is the base image's in the build.
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    # The final stage reads the wheels at /tmp/wheels, which the builder wrote at /wheels.
    (run,) = [split_run(i) for i in final.all("RUN")]
    (wheels,) = [m for m in run.mounts if m.get("from") == "builder"]
    src = tmp_path / "src"
    src.mkdir()
    _replay_builder(builder, src, {wheels["source"]: tmp_path / "wheels"}, env)
    (wheel,) = (tmp_path / "wheels").glob("gpu_exporter-*.whl")
    return wheel


@pytest.mark.slow
def test_wheel_built_as_in_the_image_holds_every_declared_package_and_script(
        tmp_path: Path) -> None:
    wheel = build_wheel_as_the_image_does(tmp_path)
    assert wheel.name == f"gpu_exporter-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        parser = configparser.ConfigParser(delimiters=("=",))
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        parser.read_string(archive.read(entry_points).decode())
    missing = declared_files() - names
    assert not missing, f"the image's wheel lacks {sorted(missing)}"
    assert dict(parser["console_scripts"]) == declared_scripts()
    for name, target in declared_scripts().items():
        assert names & set(script_module_file(target)), f"{name}: no module for {target}"
