"""Pod labels on GPU series, joined in Prometheus (opt-in): the exporter never asks the API
server for pods, so the labels come from kube-state-metrics' ``kube_pod_labels``.

kube-state-metrics exposes the pod labels its ``--metric-labels-allowlist`` lets through, as
``label_<key>`` (characters other than letters, digits and ``_`` become ``_``). The group joins
an allow-list of them, chosen by the operator, onto the per-pod GPU series with ``group_left``:

- ``namespace_pod:kube_pod_labels:max``: one series per pod with the allow-listed labels
  (kube-state-metrics may run in several replicas or shards);
- ``namespace_pod:<family>:pod_labels`` for the per-pod families (GPU memory and utilisation
  of each pod's processes, the kubelet's allocations and DRA claims): the family's series with
  the pod's labels added.

The rules need the label names, so they ship as a template (``TEMPLATE``, with
``PLACEHOLDER`` where the names go): the Helm chart fills it from
``prometheusRule.podLabels``; elsewhere ``sed 's/__POD_LABELS__/label_team, label_app/'``
(docs/attribution.md). ``instantiate`` does the same for tests.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from dashboards.rules import RecordingRule, RuleGroup, render
from exporter.catalogue import metrics

GROUP = "gpu-exporter-pod-labels"
#: The template, relative to the repository root (the chart holds a copy).
TEMPLATE = "dashboards/rules/pod-labels/gpu-exporter-pod-labels.yaml.in"
CHART_TEMPLATE = "helm/gpu-exporter/files/pod-labels/gpu-exporter-pod-labels.yaml.in"
PLACEHOLDER = "__POD_LABELS__"
POD_LABELS = "namespace_pod:kube_pod_labels:max"
#: The per-pod families the pod's labels are joined onto.
JOINED: tuple[metrics.Metric, ...] = (metrics.WORKLOAD_MEMORY, metrics.WORKLOAD_UTILIZATION,
                                      metrics.ALLOCATION_INFO, metrics.ALLOCATION_CLAIM_INFO)
_NOT_IN_NAMES = re.compile(r"[^a-zA-Z0-9_]")


def record(metric: metrics.Metric) -> str:
    """The record of ``metric``'s series with the pod's labels."""
    return f"namespace_pod:{metric.name}:pod_labels"


def label_name(key: str) -> str:
    """kube-state-metrics' label for pod label ``key`` (``app.kubernetes.io/name`` ->
    ``label_app_kubernetes_io_name``).

    Raises:
        ValueError: an empty key.
    """
    if not key.strip():
        raise ValueError("a pod label key cannot be empty")
    return "label_" + _NOT_IN_NAMES.sub("_", key.strip())


def group(names: str) -> RuleGroup:
    """The group for ``names``: the label names as PromQL lists them (``label_a, label_b``)."""
    rules = [RecordingRule(POD_LABELS, f"max by (namespace, pod, {names}) (kube_pod_labels)")]
    rules += [RecordingRule(record(metric), f"{metric.name} * on (namespace, pod) "
                                            f"group_left ({names}) {POD_LABELS}")
              for metric in JOINED]
    return RuleGroup(GROUP, tuple(rules))


def template() -> str:
    """The rule file with ``PLACEHOLDER`` for the names (what ``TEMPLATE`` holds)."""
    return render((group(PLACEHOLDER),), "pod_labels.py (fill in __POD_LABELS__)")


def instantiate(text: str, keys: Iterable[str]) -> str:
    """The template ``text`` for the pod label ``keys``.

    Raises:
        ValueError: no key, or an empty one.
    """
    names = [label_name(key) for key in keys]
    if not names:
        raise ValueError("name at least one pod label")
    return text.replace(PLACEHOLDER, ", ".join(dict.fromkeys(names)))
