"""No import cycles inside ``exporter/`` and ``dashboards/``: the data flows one way, and so do
the imports.

Every ``import`` counts: a lazy one inside a function (it still ties the two modules
together), and one under ``if TYPE_CHECKING:`` (it never runs, but it says the two modules
know each other: a cycle of types is a cycle of layers).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (ROOT / "exporter", ROOT / "dashboards")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, known: set[str], root: Path = ROOT) -> set[str]:
    """The modules of ``known`` that ``path`` imports (a ``from package import name`` counts
    the package and, where ``name`` is a module, that module)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m in known and m != name}


def import_graph(packages: tuple[Path, ...] = PACKAGES, root: Path = ROOT
                 ) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports."""
    paths = sorted(p for package in packages for p in package.rglob("*.py"))
    known = {module_name(p, root) for p in paths}
    return {module_name(p, root): imported(p, known, root) for p in paths}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                strong(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            strong(node)
    return found


def test_no_import_cycle_type_only_imports_included() -> None:
    graph = import_graph()
    assert sum(len(targets) for targets in graph.values()) > 100  # the parser sees imports
    assert cycles(graph) == []


def test_the_check_finds_a_cycle(tmp_path: Path) -> None:
    """A lazy import back from b to a is a cycle; so is one under TYPE_CHECKING."""
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def f():\n    from pkg.a import x\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from pkg import a\n")
    (package / "d.py").write_text("from pkg import c\n")
    (package / "e.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from pkg import d\n")
    graph = import_graph((package,), tmp_path)
    assert graph["pkg.c"] == {"pkg.a"}
    assert cycles({k: v for k, v in graph.items() if k != "pkg.e"}) == [["pkg.a", "pkg.b"]]
    assert cycles(graph) == [["pkg.a", "pkg.b"]]  # e imports d, nothing imports e
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from pkg import e\n")
    assert cycles(import_graph((package,), tmp_path)) == [
        ["pkg.a", "pkg.b"], ["pkg.c", "pkg.d", "pkg.e"]]
