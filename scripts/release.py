"""Cut a release of gpu-exporter: one version everywhere, the image, the chart, the notes.

Run through ``bash scripts/release`` (it makes ``.venv`` with the test extras first)::

    bash scripts/release                 # cut the current version: artefacts into dist/
    bash scripts/release check           # do the versions agree, has CHANGELOG.md a section?
    bash scripts/release notes [VERSION] # a version's release notes (its CHANGELOG section)
    bash scripts/release bump 0.2.0      # write a new version everywhere, open its section

Cutting builds the image from docker/Dockerfile with buildah and runs the image tests on it
(tests/deploy/test_image_run.py, which exports it as a ``docker load``-able archive), packages
the chart with Helm's own engine and loads the package back, builds the wheel, writes the
release notes from CHANGELOG.md (dating the version's section if it still says
``unreleased``), and prints where each artefact goes. It pushes nothing.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import helm_python  # a test extra: scripts/release installs them
import yaml

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "https://github.com/gpu-exporter/gpu-exporter"
#: Where the project's own image would be pushed (no official image is published yet).
DEFAULT_REPOSITORY = "ghcr.io/gpu-exporter/gpu-exporter"
VERSION = re.compile(r"\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?")
#: Subsections of a version, in the order they must appear (Keep a Changelog's six kinds, with
#: what breaks and how to upgrade first).
KINDS = ("Breaking changes", "Upgrade notes", "Added", "Changed", "Deprecated", "Removed",
         "Fixed", "Security")
#: What the wheel is built from (docker/Dockerfile's builder stage copies the same).
WHEEL_SOURCES = ("pyproject.toml", "README.md", "exporter", "gpu_exporter_torch")
#: How build_image tells tests/deploy/test_image_run.py which base to build on, and where and
#: under which name to export the image it tested.
BASE_ENV, EXPORT_ENV, NAME_ENV = (
    "GPU_EXPORTER_IMAGE_BASE", "GPU_EXPORTER_IMAGE_EXPORT", "GPU_EXPORTER_IMAGE_NAME")
HEADING = re.compile(rf"^## \[(?P<version>{VERSION.pattern}|Unreleased)\]"
                     r"(?: - (?P<date>\d{4}-\d{2}-\d{2}|unreleased))?$")


class ReleaseError(Exception):
    """A release cannot be cut as things are; the message says what to fix."""


# ---- one version, written in several files ----------------------------------------------

@dataclass(frozen=True)
class Place:
    """One file that carries the version: how to read it and how to write another."""

    path: str
    what: str
    pattern: re.Pattern[str]

    def read(self, root: Path) -> list[str]:
        return self.pattern.findall((root / self.path).read_text(encoding="utf-8"))

    def write(self, root: Path, version: str) -> None:
        file = root / self.path
        text = file.read_text(encoding="utf-8")
        file.write_text(self.pattern.sub(lambda m: m.group(0).replace(m.group(1), version),
                                         text), encoding="utf-8")


PLACES = (
    Place("exporter/__init__.py", "the package (exporter.__version__, gpu-exporter --version)",
          re.compile(rf'^__version__ = "({VERSION.pattern})"$', re.M)),
    Place("helm/gpu-exporter/Chart.yaml", "the chart's version",
          re.compile(rf"^version: ({VERSION.pattern})$", re.M)),
    Place("helm/gpu-exporter/Chart.yaml", "the chart's appVersion (the image tag)",
          re.compile(rf'^appVersion: "({VERSION.pattern})"$', re.M)),
    Place("docker/Dockerfile", "the image's version label",
          re.compile(rf"^ARG VERSION=({VERSION.pattern})$", re.M)),
    Place("dashboards/rules/tests/annotations.test.yaml", "the runbook links the rule tests expect",
          re.compile(rf"/blob/v({VERSION.pattern})/")),
)


def versions(root: Path) -> dict[str, set[str]]:
    """What each place says (a place with several occurrences must agree with itself)."""
    found: dict[str, set[str]] = {}
    for place in PLACES:
        values = place.read(root)
        if not values:
            raise ReleaseError(f"{place.path}: no version found for {place.what}")
        found[f"{place.path}: {place.what}"] = set(values)
    return found


def current_version(root: Path) -> str:
    """The one version every place carries.

    Raises:
        ReleaseError: the places disagree (the message lists them).
    """
    found = versions(root)
    distinct = set().union(*found.values())
    if len(distinct) != 1:
        listing = "\n".join(f"  {where}: {', '.join(sorted(v))}" for where, v in found.items())
        raise ReleaseError(f"the versions disagree:\n{listing}\n"
                           "(bash scripts/release bump X.Y.Z writes one everywhere)")
    return distinct.pop()


# ---- CHANGELOG.md ------------------------------------------------------------------------

@dataclass(frozen=True)
class Section:
    """One ``## [version] - date`` section of the changelog."""

    version: str
    date: str | None
    kinds: tuple[str, ...]
    body: str


def sections(text: str) -> list[Section]:
    """The version sections of a changelog, newest first (``Unreleased`` included)."""
    found: list[Section] = []
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("## ")]
    for n, start in enumerate(starts):
        match = HEADING.match(lines[start])
        if match is None:
            raise ReleaseError(f"CHANGELOG.md line {start + 1}: {lines[start]!r} is not "
                               "'## [X.Y.Z] - YYYY-MM-DD', '## [X.Y.Z] - unreleased' or "
                               "'## [Unreleased]'")
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        body = lines[start + 1:end]
        while body and (not body[-1].strip() or re.match(r"^\[[^\]]+\]: ", body[-1])):
            body.pop()  # trailing blank lines and the link references
        kinds = tuple(line[4:] for line in body if line.startswith("### "))
        found.append(Section(match["version"], match["date"], kinds,
                             "\n".join(body).strip() + "\n"))
    return found


def changelog_problems(text: str, version: str) -> list[str]:
    """What keeps ``text`` from being a Keep a Changelog file with a section for ``version``."""
    problems = []
    try:
        found = sections(text)
    except ReleaseError as err:
        return [str(err)]
    if not found or found[0].version != "Unreleased":
        problems.append("the first section must be '## [Unreleased]'")
    released = [s for s in found if s.version != "Unreleased"]
    if version not in {s.version for s in released}:
        problems.append(f"no section for the current version {version}")
    for section in released:
        if section.date is None:
            problems.append(f"[{section.version}]: no date (or 'unreleased') in the heading")
        unknown = [k for k in section.kinds if k not in KINDS]
        if unknown:
            problems.append(f"[{section.version}]: unknown subsections {unknown} (use {KINDS})")
        elif list(section.kinds) != sorted(section.kinds, key=KINDS.index):
            problems.append(f"[{section.version}]: subsections out of order: {section.kinds} "
                            "(breaking changes and upgrade notes first)")
        if not section.kinds:
            problems.append(f"[{section.version}]: no subsections")
        for line in section.body.splitlines():
            if line and not line.startswith(("### ", "- ", "  ")):
                problems.append(f"[{section.version}]: not a list item: {line!r}")
                break
        if f"\n[{section.version}]: {PROJECT}/releases/tag/v{section.version}" not in text:
            problems.append(f"[{section.version}]: no link reference to its release tag")
    undated = [s.version for s in released if s.date == "unreleased"]
    if undated and undated != [released[0].version]:
        problems.append(f"only the newest version may be unreleased, not {undated}")
    return problems


def release_notes(text: str, version: str) -> str:
    """The release notes of ``version``: its changelog section, titled."""
    for section in sections(text):
        if section.version == version:
            date = f" ({section.date})" if section.date and section.date != "unreleased" else ""
            return f"# gpu-exporter {version}{date}\n\n{section.body}"
    raise ReleaseError(f"CHANGELOG.md has no section for {version}")


def date_section(text: str, version: str, day: str) -> str:
    """``text`` with the heading of ``version`` dated ``day`` if it still says unreleased, and
    ``[Unreleased]`` comparing from its tag."""
    text = text.replace(f"## [{version}] - unreleased", f"## [{version}] - {day}", 1)
    return re.sub(r"^\[Unreleased\]: .*$", f"[Unreleased]: {PROJECT}/compare/v{version}...HEAD",
                  text, count=1, flags=re.M)


def open_section(text: str, version: str) -> str:
    """``text`` with a section for ``version``: the newest section renamed while it is not cut
    yet (the planned number changed), else a new one holding the Unreleased entries.

    Raises:
        ReleaseError: the changelog already has that version.
    """
    found = sections(text)
    if any(s.version == version for s in found):
        raise ReleaseError(f"CHANGELOG.md already has a section for {version}")
    newest = next((s for s in found if s.version != "Unreleased"), None)
    link = f"[{version}]: {PROJECT}/releases/tag/v{version}"
    if newest is not None and newest.date == "unreleased":
        old = newest.version
        text = text.replace(f"## [{old}] - unreleased", f"## [{version}] - unreleased", 1)
        return text.replace(f"[{old}]: {PROJECT}/releases/tag/v{old}", link, 1)
    head, _, rest = text.partition("## [Unreleased]\n")
    text = f"{head}## [Unreleased]\n\n## [{version}] - unreleased\n{rest}"
    unreleased = re.compile(r"^(\[Unreleased\]: .*)$", re.M)
    if unreleased.search(text):
        return unreleased.sub(lambda m: f"{m.group(1)}\n{link}", text, count=1)
    return f"{text.rstrip()}\n\n{link}\n"


# ---- cutting ------------------------------------------------------------------------------

def _run(command: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 1200) -> str:
    result = subprocess.run(list(command), cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout, check=False, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-4000:]
        raise ReleaseError(f"{' '.join(command)} exited {result.returncode}:\n{tail}")
    return result.stdout


def build_image(root: Path, out: Path, name: str, base: str | None) -> Path:
    """Build the image and run the image tests on it; the archive they export.

    Raises:
        ReleaseError: the build or a test failed, or the tests could not run (not root, no
            buildah): no archive means no release.
    """
    archive = out / f"gpu-exporter-{name.rpartition(':')[2]}-image.tar"
    archive.unlink(missing_ok=True)
    env = {**os.environ, EXPORT_ENV: str(archive), NAME_ENV: name}
    if base:
        env[BASE_ENV] = base
    try:
        output = _run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                       "tests/deploy/test_image_run.py"], cwd=root, env=env)
    except ReleaseError:
        archive.unlink(missing_ok=True)  # exported before a test failed: not a release
        raise
    if not archive.is_file() or " skipped" in output:
        archive.unlink(missing_ok=True)
        raise ReleaseError(f"the image tests did not run, so no image:\n{output[-2000:]}")
    return archive


def package_chart(root: Path, out: Path, version: str, repository: str) -> Path:
    """``helm package`` the chart (Helm's own engine), then load the archive back and render
    it: the package must deploy ``repository:version``.

    Raises:
        ReleaseError: the package does not load, or renders another image.
    """
    archive = Path(helm_python.package(root / "helm" / "gpu-exporter", destination=out))
    chart = helm_python.Chart.load_archive(archive.read_bytes())
    if (chart.name, chart.version, chart.metadata.get("appVersion")) != (
            "gpu-exporter", version, version):
        raise ReleaseError(f"{archive}: loads back as {chart.name} {chart.version} "
                           f"(appVersion {chart.metadata.get('appVersion')})")
    rendered = chart.render({"image": {"repository": repository}}, name="release-check",
                            namespace="default", is_install=True)
    images = {container["image"]
              for path, text in rendered.items() if path.endswith("daemonset.yaml")
              for doc in yaml.safe_load_all(text) if doc
              for container in doc["spec"]["template"]["spec"]["containers"]}
    if images != {f"{repository}:{version}"}:
        raise ReleaseError(f"{archive}: the DaemonSet runs {images}, not {repository}:{version}")
    return archive


def build_wheel(root: Path, out: Path, version: str) -> Path:
    """The wheel of both packages (what the image installs, and what a workstation installs),
    built from a copy of exactly what the image's builder stage copies: setuptools' in-tree
    build/ directory can hold modules that no longer exist."""
    with tempfile.TemporaryDirectory(prefix="gpu-exporter-wheel-") as scratch:
        source = Path(scratch)
        for name in WHEEL_SOURCES:
            if (root / name).is_dir():
                shutil.copytree(root / name, source / name,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(root / name, source / name)
        _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
              str(out), str(source)], cwd=source)
    wheel = out / f"gpu_exporter-{version}-py3-none-any.whl"
    if not wheel.is_file():
        raise ReleaseError(f"pip wheel wrote no {wheel.name} into {out}")
    return wheel


def checksums(files: Sequence[Path], out: Path) -> Path:
    lines = [f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}" for f in files]
    target = out / "SHA256SUMS"
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


def push_instructions(version: str, repository: str, out: Path, *, image: Path | None,
                      chart: Path, wheel: Path, notes: Path) -> str:
    """Where each artefact goes; nothing is pushed by the script."""
    charts = f"oci://{repository.rpartition('/')[0]}/charts"
    lines = [f"gpu-exporter {version}: artefacts in {out}/", ""]
    if image is None:
        lines += ["NOT A RELEASE: the image was skipped (--skip-image).", ""]
    else:
        lines += ["image (docker-archive; docker load, podman load or skopeo read it):",
                  f"  skopeo copy docker-archive:{image} docker://{repository}:{version}",
                  f"  or: docker load -i {image} && docker push {repository}:{version}", ""]
    lines += [
        "chart (OCI registry; users then set image.repository if it is not the default):",
        f"  helm push {chart} {charts}", "",
        "wheel (PyPI, or any index your workstations use):",
        f"  twine upload {wheel}", "",
        "tag and release notes (after CHANGELOG.md's dated section is committed):",
        f"  git tag -a v{version} -m 'gpu-exporter {version}' && git push origin v{version}",
        f"  gh release create v{version} --title 'gpu-exporter {version}' "
        f"--notes-file {notes} {out}/*",
    ]
    return "\n".join(lines)


def cut(root: Path, out: Path, *, repository: str, base: str | None, day: str,
        skip_image: bool, say: Callable[[str], None]) -> list[Path]:
    """Every artefact of the current version, into ``out``.

    Raises:
        ReleaseError: something is not ready; nothing is half-written into ``out`` then except
            what finished before.
    """
    version = current_version(root)
    changelog = root / "CHANGELOG.md"
    text = changelog.read_text(encoding="utf-8")
    problems = changelog_problems(text, version)
    if problems:
        raise ReleaseError("CHANGELOG.md:\n  " + "\n  ".join(problems))
    out.mkdir(parents=True, exist_ok=True)
    dated = date_section(text, version, day)
    if dated != text:
        changelog.write_text(dated, encoding="utf-8")
        say(f"dated CHANGELOG.md's section of {version} {day}: commit it with the tag")
    notes = out / f"RELEASE-NOTES-{version}.md"
    notes.write_text(release_notes(dated, version), encoding="utf-8")
    say(f"notes   {notes}")
    chart = package_chart(root, out, version, repository)
    say(f"chart   {chart} (loads back, deploys {repository}:{version})")
    wheel = build_wheel(root, out, version)
    say(f"wheel   {wheel}")
    image = None
    if not skip_image:
        say("image   building with buildah and running the image tests (a few minutes)")
        image = build_image(root, out, f"{repository}:{version}", base)
        say(f"image   {image}")
    artefacts = [p for p in (image, chart, wheel, notes) if p is not None]
    artefacts.append(checksums(artefacts, out))
    say("")
    say(push_instructions(version, repository, out, image=image, chart=chart, wheel=wheel,
                          notes=notes))
    return artefacts


def bump(root: Path, version: str) -> None:
    """Write ``version`` into every place, open its changelog section and regenerate the files
    that embed it (the rules' runbook links).

    Raises:
        ReleaseError: not a version, or its changelog section exists already.
    """
    if not VERSION.fullmatch(version):
        raise ReleaseError(f"{version!r} is not a version (X.Y.Z)")
    changelog = root / "CHANGELOG.md"
    opened = open_section(changelog.read_text(encoding="utf-8"), version)
    for place in PLACES:
        place.write(root, version)
    changelog.write_text(opened, encoding="utf-8")
    # A new interpreter, importing this checkout's exporter: it carries the new version.
    _run([sys.executable, "-m", "dashboards.generate", "--root", str(root)], cwd=root,
         env={**os.environ, "PYTHONPATH": str(root)})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/release", description=__doc__.split("\n\n")[0],
        epilog="cut: every artefact of the current version; check: do the versions agree and "
        "has CHANGELOG.md its section; notes [VERSION]: a version's release notes; bump "
        "VERSION: write a new version everywhere and open its CHANGELOG.md section.")
    parser.add_argument("command", nargs="?", default="cut",
                        choices=("cut", "check", "notes", "bump"))
    parser.add_argument("version", nargs="?", help="notes: which version; bump: the new one")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the artefacts go (default: dist/)")
    parser.add_argument("--repository", default=DEFAULT_REPOSITORY,
                        help="the image's name in your registry (default: %(default)s)")
    parser.add_argument("--base-image", default=None, help=(
        "Python base image to build on (default: the Dockerfile's, from Docker Hub; "
        "localhost/debian-python:bookworm makes one from Debian's packages, as the tests do)"))
    parser.add_argument("--date", default=datetime.date.today().isoformat(),
                        help="the release date for CHANGELOG.md (default: today)")
    parser.add_argument("--skip-image", action="store_true",
                        help="no image (to try the rest: the result is not a release)")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.command == "bump" and not args.version:
        parser.error("bump needs the new version, e.g. bump 0.2.0")
    root: Path = args.root
    try:
        if args.command == "check":
            version = current_version(root)
            problems = changelog_problems((root / "CHANGELOG.md").read_text(encoding="utf-8"),
                                          version)
            if problems:
                raise ReleaseError("CHANGELOG.md:\n  " + "\n  ".join(problems))
            print(f"{version}: every place agrees; CHANGELOG.md has its section")
        elif args.command == "notes":
            text = (root / "CHANGELOG.md").read_text(encoding="utf-8")
            print(release_notes(text, args.version or current_version(root)), end="")
        elif args.command == "bump":
            bump(root, args.version)
            print(f"{args.version} written; fill in CHANGELOG.md's section and commit")
        else:
            cut(root, args.out or root / "dist", repository=args.repository,
                base=args.base_image or None, day=args.date, skip_image=args.skip_image,
                say=print)
    except ReleaseError as err:
        print(f"release: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
