"""Render helm/gpu-exporter with Helm's own engine (helm-python-sdk) and parse the objects.

``Chart.render`` in helm-python-sdk 0.2.2 has no parameter for the cluster's API versions, but
the native ``helm_render`` call it wraps accepts an ``api_versions`` option (what
``helm template --api-versions`` sets). The SDK is pinned in pyproject, so this is stable.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import helm_python
import yaml
from helm_python import _native

REPO = Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "helm" / "gpu-exporter"
RELEASE = "gpu"
NAMESPACE = "monitoring"
#: What a cluster with the Prometheus Operator serves (the chart checks the group/version):
#: v1 for monitors and rules, v1alpha1 for AlertmanagerConfig.
OPERATOR_API = "monitoring.coreos.com/v1"
OPERATOR_APIS = (OPERATOR_API, "monitoring.coreos.com/v1alpha1")
#: Kubernetes versions the rendered objects are validated against (oldest supported, newest known).
KUBE_VERSIONS: tuple[str, ...] = ("1.25", "1.37")


@dataclass(frozen=True)
class Rendered:
    """One render: the Kubernetes objects (by kind and name) and the NOTES text."""

    objects: tuple[dict[str, Any], ...]
    notes: str

    def kinds(self) -> list[str]:
        return sorted(o["kind"] for o in self.objects)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str) -> dict[str, Any]:
        found = self.of_kind(kind)
        assert len(found) == 1, f"expected one {kind}, got {len(found)} ({self.kinds()})"
        return found[0]


@cache
def chart() -> helm_python.Chart:
    """The chart, loaded once per test session."""
    return helm_python.Chart.load(CHART_DIR)


def render_raw(
    values: Mapping[str, Any] | None = None,
    *,
    api_versions: tuple[str, ...] = (),
    name: str = RELEASE,
    namespace: str = NAMESPACE,
) -> dict[str, str]:
    """Template path -> rendered text.

    Raises:
        helm_python.HelmValuesError: the values fail the chart's schema.
        helm_python.HelmRenderError: a template failed (including the chart's own ``fail``).
    """
    opts = {"name": name, "namespace": namespace, "api_versions": list(api_versions),
            "is_install": True}
    out = _native.call_string(
        "helm_render", chart()._raw(), json.dumps(dict(values or {})), json.dumps(opts)
    )
    manifests: dict[str, str] = json.loads(out)
    return manifests


def _documents(manifests: Mapping[str, str]) -> Iterator[dict[str, Any]]:
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc is None:
                continue
            assert isinstance(doc, dict), f"{path}: not a mapping: {doc!r}"
            yield doc


def render(
    values: Mapping[str, Any] | None = None,
    *,
    operator: bool = True,
    name: str = RELEASE,
    namespace: str = NAMESPACE,
) -> Rendered:
    """Render and parse; ``operator`` says whether the cluster serves the Prometheus Operator API.

    Raises:
        helm_python.HelmValuesError: the values fail the chart's schema.
        helm_python.HelmRenderError: a template failed.
    """
    manifests = render_raw(
        values, api_versions=OPERATOR_APIS if operator else (), name=name, namespace=namespace
    )
    notes = "".join(v for k, v in manifests.items() if k.endswith("NOTES.txt"))
    return Rendered(objects=tuple(_documents(manifests)), notes=notes)
