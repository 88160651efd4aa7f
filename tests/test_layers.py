"""The layers of the package, and an import against their order fails.

Bottom first: the catalogue (declarations: metric rows, workload kinds, thresholds, record
names, the attribution flags' defaults) imports nothing else of the project; the snapshot and
the shared helpers read only the catalogue; then the sources, attribution, collection
(scheduler, state and the configuration that says what to collect), exposition, the web app
and the command line, each importing only its own layer and those below. Beside them,
``exporter/report/`` and ``dashboards/`` read the catalogue and never the running exporter's
internals; the one generator of derived files (``dashboards.generate`` and the golden
expositions it writes) runs the exporter's code on purpose. Imports under ``TYPE_CHECKING``
count (``tests/test_import_cycles.py`` reads the imports the same way).
"""

from __future__ import annotations

import pytest

from tests.test_import_cycles import import_graph

#: The layers of ``exporter/``, bottom first, each a tuple of module prefixes.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("catalogue", ("exporter.catalogue",)),
    ("snapshot and shared helpers", (
        "exporter.snapshot", "exporter.health", "exporter.allocations", "exporter.frozeninit",
        "exporter.files", "exporter.boundedyaml", "exporter.logs", "exporter.logthrottle",
        "exporter.memory", "exporter.signals", "exporter.values")),
    ("sources", ("exporter.sources",)),
    ("attribution", ("exporter.attribution",)),
    ("collection", ("exporter.scheduler", "exporter.state", "exporter.config")),
    ("exposition", ("exporter.exposition",)),
    ("web", ("exporter.web",)),
    ("command line", ("exporter.cli", "exporter.entry", "exporter.__main__", "exporter.docs")),
)
#: Beside the layers: what each reader may import (besides its own modules), and which layers
#: may import it.
READERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "exporter.report": (("exporter.catalogue",), ("web", "command line")),
    # dashboards reads a site's settings file with the bounded YAML loader.
    "dashboards": (("exporter.catalogue", "exporter.boundedyaml"), ()),
}
#: The generator of every derived file: it reads the flags and renders golden expositions.
GENERATOR = ("dashboards.generate", "dashboards.golden")
#: The version, which every layer may read.
TOP = "exporter"


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> str | None:
    """The layer (or reader) of ``module``; None for the version and the generator."""
    if module == TOP or any(_within(module, g) for g in GENERATOR):
        return None
    for reader in READERS:
        if _within(module, reader):
            return reader
    for name, prefixes in LAYERS:
        if any(_within(module, prefix) for prefix in prefixes):
            return name
    raise AssertionError(f"{module}: in no layer (add it to LAYERS in tests/test_layers.py)")


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import running against the layers, as ``importer -> imported (why)``."""
    order = {name: rank for rank, (name, _) in enumerate(LAYERS)}
    found = []
    for module, targets in sorted(graph.items()):
        own = layer_of(module)
        if own is None:
            continue
        for target in sorted(targets):
            theirs = layer_of(target)
            if theirs is None or theirs == own:
                continue
            if own in READERS:
                allowed, _ = READERS[own]
                if not any(_within(target, prefix) for prefix in allowed):
                    found.append(f"{module} -> {target} ({own} reads only {allowed})")
            elif theirs in READERS:
                if own not in READERS[theirs][1]:
                    found.append(f"{module} -> {target} ({theirs} is read by "
                                 f"{READERS[theirs][1] or 'no layer'})")
            elif order[theirs] > order[own]:
                found.append(f"{module} -> {target} ({own} is below {theirs})")
    return found


def test_every_module_has_a_layer() -> None:
    for module in import_graph():
        layer_of(module)


def test_no_import_runs_against_the_layers() -> None:
    assert violations(import_graph()) == []


def test_the_catalogue_imports_nothing_else_of_the_project() -> None:
    graph = import_graph()
    catalogue = [m for m in graph if _within(m, "exporter.catalogue")]
    assert len(catalogue) >= 10
    assert {t for m in catalogue for t in graph[m] if not _within(t, "exporter.catalogue")} == set()


@pytest.mark.parametrize(("importer", "imported", "why"), [
    ("exporter.catalogue.metrics.core", "exporter.snapshot", "catalogue is below snapshot"),
    ("exporter.sources.simulated.source", "exporter.attribution.workloads",
     "sources is below attribution"),
    ("exporter.state", "exporter.exposition.render", "collection is below exposition"),
    ("exporter.report.collect", "exporter.scheduler", "exporter.report reads only"),
    ("dashboards.node", "exporter.exposition.gpu", "dashboards reads only"),
    ("exporter.attribution.enrich", "exporter.report.model", "exporter.report is read by"),
])
def test_an_import_against_the_order_is_found(importer: str, imported: str, why: str) -> None:
    graph = import_graph()
    assert imported not in graph[importer]
    (found,) = violations({importer: {imported}, imported: set()})
    assert why in found
