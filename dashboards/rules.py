"""Prometheus rule files as data: alerting and recording rules, groups, and their YAML.

The YAML is what Prometheus, promtool and the Helm chart's PrometheusRule read; it is written by
``python -m dashboards.generate`` and must never be edited by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from exporter import __version__

#: The git tag of this version's release; rule files link to the runbook as of that tag, so an
#: alert never points at a runbook newer (or older) than the rules that fired it.
RELEASE_TAG = f"v{__version__}"
#: Where the runbooks are published; each alert links to ``RUNBOOK_BASE_URL + RUNBOOK_FILE +
#: "#" + alertname.lower()`` (the GitHub anchor of the alert's heading in the runbook).
RUNBOOK_BASE_URL = (
    f"https://github.com/gpu-exporter/gpu-exporter/blob/{RELEASE_TAG}/dashboards/runbooks/")
RUNBOOK_FILE = "gpu-exporter-alerts.md"

Severity = Literal["critical", "warning", "info"]
#: Who an alert is for: ``owner``, the person, pod or job that holds or does what it is about
#: (told first, politely, with the facts), or ``operator``, whoever runs the GPUs (hardware,
#: thermal, the exporter, the fleet). Alertmanager routes on the ``audience`` label.
Audience = Literal["owner", "operator"]
#: Where an alert fired, for its description template: the scrape target, and one GPU of it.
#: On Kubernetes the instance is a pod address; the ServiceMonitor's node label says where.
HOST_TEXT = "{{ $labels.instance }}{{ with $labels.node }} (node {{ . }}){{ end }}"
GPU_TEXT = "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on " + HOST_TEXT


@dataclass(frozen=True, slots=True)
class Live:
    """How the live test (a real Prometheus scraping the bundled scenarios on the simulated
    source, ``tests/dashboards/test_live_prometheus.py``) checks an alert.

    ``fires``: (scenario, GPU index or None) pairs it must fire for; ``only_that_gpu``: it
    fires on that GPU and on none of its neighbours; ``reason``: why no scenario can fire it
    (promtool's unit tests cover it). Every alert must stay silent under ``calm`` and
    ``training-node``.
    """

    fires: tuple[tuple[str, str | None], ...] = ()
    only_that_gpu: bool = False
    reason: str = ""


def fires_under(*scenarios: str, only_that_gpu: bool = False) -> Live:
    """The bundled scenarios designed to fire an alert: ``"memory-leak/0"`` (scenario and GPU
    index) or ``"shared-workstation"`` (an alert that is not per GPU)."""
    fires = tuple((name, gpu or None) for name, _, gpu in (s.partition("/") for s in scenarios))
    return Live(fires, only_that_gpu)


def not_live(reason: str) -> Live:
    """An alert no simulated scenario can fire, and why."""
    return Live(reason=reason)


@dataclass(frozen=True, slots=True)
class AlertRule:
    """One alerting rule, with what its docs and tests follow from.

    ``summary`` and ``description`` are Prometheus templates. ``audience`` says who is told
    (``Audience``). ``when`` is the "fires when" column of dashboards/README.md's alert table;
    ``runbook`` the Markdown of its section (``## <alert>``) in the runbook; ``live`` the
    scenarios that fire it in the live test. ``python -m dashboards.generate`` writes the table
    and the runbook's sections from them. ``details`` are further annotations (name, template)
    the notifications show: for owner alerts the processes concerned and the commands that end
    them (``dashboards.owners``).
    """

    alert: str
    expr: str
    for_: str
    severity: Severity
    audience: Audience
    summary: str
    description: str
    when: str = ""
    live: Live = field(default_factory=Live)
    runbook: str = ""
    details: tuple[tuple[str, str], ...] = ()

    @property
    def runbook_url(self) -> str:
        """The link to this alert's section of the runbook."""
        return f"{RUNBOOK_BASE_URL}{RUNBOOK_FILE}#{self.alert.lower()}"

    def to_dict(self, annotations: bool = True) -> dict[str, Any]:
        """The rule as it appears in a rule file (``annotations`` False: without them)."""
        rule: dict[str, Any] = {"alert": self.alert, "expr": self.expr}
        if self.for_ not in ("", "0s"):
            rule["for"] = self.for_
        rule["labels"] = {"severity": self.severity, "audience": self.audience}
        if not annotations:
            return rule
        rule["annotations"] = {
            "summary": self.summary,
            "description": self.description,
            **dict(self.details),
            "runbook_url": self.runbook_url,
        }
        return rule


@dataclass(frozen=True, slots=True)
class RecordingRule:
    """One recording rule, named ``level:metric:operations``; ``labels`` are added to what it
    records (a static series' identity, a currency)."""

    record: str
    expr: str
    labels: tuple[tuple[str, str], ...] = ()

    def to_dict(self, annotations: bool = True) -> dict[str, Any]:
        """The rule as it appears in a rule file (recording rules have no annotations)."""
        rule: dict[str, Any] = {"record": self.record, "expr": self.expr}
        if self.labels:
            rule["labels"] = dict(self.labels)
        return rule


@dataclass(frozen=True, slots=True)
class RuleGroup:
    """A named group; the Helm chart can switch each group on or off."""

    name: str
    rules: Sequence[AlertRule | RecordingRule] = field(default_factory=tuple)
    #: Its own evaluation interval (None: Prometheus's global one). Accounting rules fix it,
    #: because their range totals multiply by it.
    interval: str | None = None

    def to_dict(self, annotations: bool = True) -> dict[str, Any]:
        """The group as it appears in a rule file."""
        head: dict[str, Any] = {"name": self.name}
        if self.interval is not None:
            head["interval"] = self.interval
        return {**head, "rules": [rule.to_dict(annotations) for rule in self.rules]}


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line expressions, plain order (insertion order kept)."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)

_HEADER = (
    "# Generated by `python -m dashboards.generate` from dashboards/{source}; do not edit.\n"
    "# Thresholds live in exporter/catalogue/thresholds.py (dashboards/README.md, \"Tuning\").\n"
)
_BEHAVIOUR_NOTE = (
    "# The alert rules without annotations, for the behaviour unit tests next to this folder\n"
    "# (promtool compares annotations exactly; annotations.test.yaml checks the wording).\n"
)


def render(groups: Sequence[RuleGroup], source: str, *, annotations: bool = True) -> str:
    """The rule file text for these groups (``annotations`` False: the behaviour-test copy).

    Raises:
        ValueError: two groups share a name or a rule expression is empty.
    """
    names = [group.name for group in groups]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate rule group names: {names}")
    for group in groups:
        for rule in group.rules:
            if not rule.expr.strip():
                raise ValueError(f"empty expression in group {group.name}")
    body = yaml.dump(
        {"groups": [group.to_dict(annotations) for group in groups]},
        Dumper=_Dumper,
        sort_keys=False,
        width=4096,
        allow_unicode=True,
    )
    return _HEADER.format(source=source) + ("" if annotations else _BEHAVIOUR_NOTE) + body
