"""Escalation: an owner alert nobody acted on reaches the lab lead or operator.

Alertmanager has no time-based escalation (a route notifies its receiver, then repeats). The
escalation is therefore a rule: ``GpuOwnerAlertUnresolved`` fires for every owner alert
(``audience="owner"``) that has been firing for ``thresholds.OWNER_ESCALATE_AFTER``, read from
Prometheus's own ``ALERTS`` series, with the owner alert's labels (its owner, node, GPU; not its
severity) and its name in ``owner_alert``. It is an operator alert; the shipped Alertmanager
configuration sends it to the escalation receiver (the lab lead, else the operator) and inhibits
the escalations that a more specific one covers, as it does for the owner alerts themselves.
Prometheus keeps the pending time of a rule across restarts (``ALERTS_FOR_STATE``), so a
restart does not reset it.

It sits in its own group, evaluated after the owner alerts, and can be switched off like any
other (Helm: ``prometheusRule.disabledGroups``).
"""

from __future__ import annotations

from collections.abc import Sequence

from dashboards import owners
from dashboards.rules import HOST_TEXT, AlertRule, RuleGroup
from exporter import thresholds

ALERT = "GpuOwnerAlertUnresolved"
GROUP = "gpu-escalation"
#: The label carrying the escalated alert's name (``alertname`` is the escalation's own).
OWNER_ALERT = "owner_alert"

_OWNER_TEXT = (
    "{{ with $labels.user }}user {{ . }}{{ else }}{{ with $labels.namespace }}namespace {{ . }}"
    "{{ with $labels.pod }}, pod {{ . }}{{ end }}{{ else }}{{ with $labels.slurm_job }}Slurm job "
    "{{ . }}{{ else }}an unknown owner{{ end }}{{ end }}{{ end }}"
)


def owner_alert_names(groups: Sequence[RuleGroup]) -> list[str]:
    """The owner alerts of ``groups``, in file order."""
    return [rule.alert for group in groups for rule in group.rules
            if isinstance(rule, AlertRule) and rule.audience == "owner"]


def group(groups: Sequence[RuleGroup]) -> RuleGroup:
    """The escalation rule for the owner alerts of ``groups``.

    Raises:
        ValueError: ``groups`` hold no owner alert.
    """
    names = owner_alert_names(groups)
    if not names:
        raise ValueError("no owner alert to escalate")
    firing = f'ALERTS{{alertstate="firing", audience="owner", alertname=~"{"|".join(names)}"}}'
    unresolved = AlertRule(
        alert=ALERT,
        expr=(f"max without (alertstate, alertname, audience, severity) (\n"
              f'  label_replace({firing}, "{OWNER_ALERT}", "$1", "alertname", "(.+)")\n'
              ")\n"),
        for_=thresholds.OWNER_ESCALATE_AFTER,
        severity="warning",
        audience="operator",
        summary="An owner was told about their GPU use and has not acted.",
        description=(
            f"{{{{ $labels.{OWNER_ALERT} }}}} about {_OWNER_TEXT}"
            "{{ with $labels.instance }} on " + HOST_TEXT + "{{ end }}"
            "{{ with $labels.gpu }} (GPU {{ . }}){{ end }} has been firing for more than "
            f"{thresholds.OWNER_ESCALATE_AFTER}: its owner was notified and the cause is still "
            "there. Talk to them, or end the workload (commands below)."
        ),
        details=(
            ("processes", owners.process_list(owners.all_processes(), idle=True)),
            ("commands", owners.commands(owners.all_processes())),
        ),
    )
    return RuleGroup(GROUP, (unresolved,))
