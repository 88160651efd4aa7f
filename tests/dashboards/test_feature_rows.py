"""Rows whose data only some nodes have (MIG, the PyTorch allocator publisher) start collapsed,
so a node without them shows no wall of "No data"; every other row starts open."""

from __future__ import annotations

import re

from tests.dashboards.grafana import GRAFANA_DIR, Json, load

#: Series only a GPU in MIG mode, or a process running the allocator publisher, has.
FEATURE_METRIC = re.compile(r"\bgpu_mig_\w+|\bgpu_\w+_torch_\w+")
METRIC = re.compile(r"\bgpu_\w+")
NODE = load(GRAFANA_DIR / "gpu-node-device.json")


def _reads_only_features(panel: Json) -> bool:
    names = {name for target in panel.get("targets", [])
             for name in METRIC.findall(target.get("expr", ""))}
    return bool(names) and all(FEATURE_METRIC.fullmatch(name) for name in names)


def _rows(board: Json) -> dict[str, tuple[bool, list[Json]]]:
    """Row title -> (collapsed, the panels that show under it)."""
    rows: dict[str, tuple[bool, list[Json]]] = {}
    current: list[Json] = []
    for panel in board["panels"]:
        if panel["type"] == "row":
            current = list(panel.get("panels", []))
            rows[panel["title"]] = (panel["collapsed"], current)
        else:
            current.append(panel)
    return rows


def test_mig_and_pytorch_rows_start_collapsed_with_their_panels() -> None:
    rows = _rows(NODE)
    collapsed = {title for title, (closed, _) in rows.items() if closed}
    assert collapsed == {"MIG instances", "Inside the processes (PyTorch allocator)"}
    for title in collapsed:
        panels = rows[title][1]
        assert panels, f"{title}: a collapsed row holds its panels"
        for panel in panels:
            assert FEATURE_METRIC.search(str(panel.get("targets"))), (title, panel["title"])
    # Nothing that reads only MIG or allocator series stands in an open row.
    for title, (closed, panels) in rows.items():
        if not closed:
            misplaced = [p["title"] for p in panels if _reads_only_features(p)]
            assert misplaced == [], f"{title}: {misplaced}"
    # A collapsed row's panels are not also on the dashboard's top level (Grafana would show
    # them twice once the row opens).
    top = {p["id"] for p in NODE["panels"]}
    assert not top & {p["id"] for title in collapsed for p in rows[title][1]}
