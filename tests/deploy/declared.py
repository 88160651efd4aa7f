"""What pyproject.toml says the wheel holds: its packages' files and its console scripts."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

import pytest

from tests.deploy.stack import REPO

tomllib = pytest.importorskip("tomllib")  # Python 3.11+


def pyproject() -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return data


def _package_patterns() -> tuple[list[str], list[str]]:
    find = pyproject()["tool"]["setuptools"]["packages"]["find"]
    return list(find["include"]), list(find.get("exclude", []))


def declared_files() -> set[str]:
    """Paths (relative to site-packages) the wheel must hold, from pyproject.toml: the modules
    of every package its find patterns select (directories without ``__init__.py`` too:
    setuptools finds namespace packages by default under pyproject) and every file its
    package-data globs match."""
    include, exclude = _package_patterns()
    files: set[str] = set()
    for top in sorted(REPO.iterdir()):
        if not top.is_dir() or not any(fnmatchcase(top.name, p) for p in include):
            continue
        for directory in [top, *sorted(d for d in top.rglob("*") if d.is_dir())]:
            parts = directory.relative_to(REPO).parts
            dotted = ".".join(parts)
            if (not all(part.isidentifier() for part in parts)
                    or not any(fnmatchcase(dotted, p) for p in include)
                    or any(fnmatchcase(dotted, p) for p in exclude)):
                continue
            files.update(f.relative_to(REPO).as_posix() for f in directory.glob("*.py"))
    for package, patterns in pyproject()["tool"]["setuptools"]["package-data"].items():
        root = REPO / package.replace(".", "/")
        for pattern in patterns:
            matched = {f.relative_to(REPO).as_posix() for f in root.glob(pattern) if f.is_file()}
            assert matched, f"package-data of {package}: {pattern} matches no file"
            files |= matched
    return files


def declared_scripts() -> dict[str, str]:
    """pyproject's console scripts: name -> ``module:function``."""
    scripts: dict[str, str] = pyproject()["project"]["scripts"]
    assert scripts
    return scripts


def script_module_file(target: str) -> tuple[str, str]:
    """The two files a script's module may be (``a/b.py`` or ``a/b/__init__.py``)."""
    path = target.partition(":")[0].replace(".", "/")
    return f"{path}.py", f"{path}/__init__.py"
