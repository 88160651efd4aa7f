"""The chart's opt-in pod-label join: ``prometheusRule.podLabels`` adds the group
gpu-exporter-pod-labels to the PrometheusRule, filled with kube-state-metrics' names of the
listed pod labels; without it there is no such group."""

from __future__ import annotations

from typing import Any

import pytest

from dashboards import pod_labels
from tests.deploy.helm_render import REPO, render


def _groups(values: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
    rule = render({"prometheusRule": values}).one("PrometheusRule")
    return {group["name"]: group["rules"] for group in rule["spec"]["groups"]}


def test_no_pod_labels_no_group() -> None:
    assert pod_labels.GROUP not in _groups({})


def test_listed_pod_labels_fill_the_template_as_the_python_side_does() -> None:
    keys = ["team", "app.kubernetes.io/name"]
    groups = _groups({"podLabels": keys})
    expected = pod_labels.instantiate(
        (REPO / pod_labels.TEMPLATE).read_text(encoding="utf-8"), keys)
    rules = groups[pod_labels.GROUP]
    assert [rule["record"] for rule in rules] == [
        pod_labels.POD_LABELS, *(pod_labels.record(row) for row in pod_labels.JOINED)]
    for rule in rules:
        assert f"expr: {rule['expr']}\n" in expected
        assert pod_labels.PLACEHOLDER not in rule["expr"]
    assert "group_left (label_team, label_app_kubernetes_io_name)" in rules[1]["expr"]


def test_the_group_can_be_disabled_by_name_like_the_others() -> None:
    groups = _groups({"podLabels": ["team"], "disabledGroups": [pod_labels.GROUP]})
    assert pod_labels.GROUP not in groups


@pytest.mark.parametrize("bad", [[""], ["team", "team"], "team"])
def test_bad_lists_are_refused_by_the_schema(bad: object) -> None:
    with pytest.raises(Exception, match="podLabels"):
        _groups({"podLabels": bad})
