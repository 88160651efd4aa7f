"""The catalogue's name index: every public name of a row module is a name of
``exporter.catalogue.metrics``, none is defined twice, and the package's tables are the rows."""

from __future__ import annotations

import ast
import inspect

from exporter.catalogue import metrics


def _defined(module: object) -> set[str]:
    """The public names a module defines itself (not those it imports)."""
    tree = ast.parse(inspect.getsource(module))  # type: ignore[arg-type]
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_")}


def test_no_name_is_defined_by_two_row_modules() -> None:
    seen: dict[str, str] = {}
    for module in (metrics.core, *metrics.ROW_MODULES):
        for name in _defined(module):
            assert name not in seen, f"{name}: in {seen[name]} and {module.__name__}"
            seen[name] = module.__name__


def test_every_row_is_reachable_by_its_constant_name() -> None:
    for module in metrics.ROW_MODULES:
        for name in _defined(module):
            assert getattr(metrics, name) is getattr(module, name), name


def test_the_catalogue_is_every_row_once_in_documentation_order() -> None:
    rows = [row for module in metrics.ROW_MODULES for name in sorted(_defined(module))
            if isinstance(row := getattr(module, name), metrics.Metric)]
    assert sorted(r.name for r in rows) == sorted(r.name for r in metrics.CATALOGUE)
    assert len(set(metrics.CATALOGUE)) == len(metrics.CATALOGUE)
    assert metrics.CATALOGUE[0] is metrics.GPU_INFO  # gpu.py first
