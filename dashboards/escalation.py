"""Escalation: an owner alert nobody acted on reaches the lab lead or operator.

Alertmanager has no time-based escalation (a route notifies its receiver, then repeats). The
escalation is therefore a rule: ``GpuOwnerAlertUnresolved`` fires for every owner alert
(``audience="owner"``) that has been firing for ``thresholds.OWNER_ESCALATE_AFTER``, read from
Prometheus's own ``ALERTS_FOR_STATE`` series (when each active alert became pending: its own
``for`` plus the escalation time ago), with the owner alert's labels (its owner, node, GPU; not
its severity) and its name in ``owner_alert``. It has no ``for`` of its own, so it is never
pending for a day: its annotations (the processes) are only queried once it fires. It is an
operator alert; the shipped Alertmanager configuration sends it to the escalation receiver (the
lab lead, else the operator) and inhibits the escalations that a more specific one covers, as it
does for the owner alerts themselves.
Prometheus restores ``ALERTS_FOR_STATE`` after a restart for alerts whose ``for`` exceeds its
``--rules.alert.for-grace-period`` (10m; the idle alerts' hour), so a restart does not reset
their clock.

It sits in its own group, evaluated after the owner alerts, and can be switched off like any
other (Helm: ``prometheusRule.disabledGroups``).
"""

from __future__ import annotations

from collections.abc import Sequence

from dashboards import owners
from dashboards.promql import seconds_text
from dashboards.rules import HOST_TEXT, AlertRule, RuleGroup, not_live
from exporter.catalogue import thresholds

ALERT = "GpuOwnerAlertUnresolved"
GROUP = "gpu-escalation"
#: The label carrying the escalated alert's name (``alertname`` is the escalation's own).
OWNER_ALERT = "owner_alert"

_OWNER_TEXT = (
    "{{ with $labels.user }}user {{ . }}{{ else }}{{ with $labels.namespace }}namespace {{ . }}"
    "{{ with $labels.pod }}, pod {{ . }}{{ end }}{{ else }}{{ with $labels.slurm_job }}Slurm job "
    "{{ . }}{{ else }}an unknown owner{{ end }}{{ end }}{{ end }}"
)


_RUNBOOK = """\
**Meaning:** an owner alert (`audience="owner"`, named in `owner_alert`) has been firing for
24 hours (`OWNER_ESCALATE_AFTER` in `exporter/catalogue/thresholds.py`): its owner was mailed
and the cause is still there. The labels are the owner alert's (`user` or `namespace`/`pod`,
`instance`, `gpu` where it had them); the value is how long it has been active; the notice lists
the processes and the commands that end them. **Impact:** a GPU kept from everybody else for a
day or more.

Alertmanager has no time-based escalation, so this is a rule on Prometheus's own
`ALERTS_FOR_STATE` series (restored after a restart for alerts with a `for` over 10 minutes). The
shipped configuration sends it to the lead of the owner's team (contacts file `teams`), else to
`lead`, else to the operator; a user's GpuProcessIdle escalation mutes the escalations of their
milder idle alerts.

1. Talk to the owner: they may have a reason (a long interactive session, a debugger they
   return to). A silence in Alertmanager (`amtool silence add owner_alert=GpuProcessIdle
   user=<user> --duration 8h`) stops this notice for that time.
2. Otherwise end the workload with the command in the notice (`kill <pid>` on the node,
   `scancel <job>`, `kubectl delete pod -n <ns> <pod>`).
3. If it keeps happening: the weekly idle report (`gpu-exporter report --since 7d`, see
   [Idle accounting](#idle-accounting-who-held-gpus-idle-over-a-week)) and an idle culler for
   notebooks.
"""


def owner_alerts(groups: Sequence[RuleGroup]) -> list[AlertRule]:
    """The owner alerts of ``groups``, in file order."""
    return [rule for group in groups for rule in group.rules
            if isinstance(rule, AlertRule) and rule.audience == "owner"]


def owner_alert_names(groups: Sequence[RuleGroup]) -> list[str]:
    """The names of the owner alerts of ``groups``, in file order."""
    return [rule.alert for rule in owner_alerts(groups)]


def _unresolved(rules: Sequence[AlertRule]) -> str:
    """Owner alerts firing for OWNER_ESCALATE_AFTER: active (``ALERTS_FOR_STATE``, its value
    the time the alert became pending) for their own ``for`` plus that time; the value is how
    long each has been active. One comparison per alert, in file order (the same text whether
    a ``for`` is a site's value or, in the chart's copy, a placeholder: ``dashboards.settings``)."""
    after = seconds_text(thresholds.OWNER_ESCALATE_AFTER)
    parts = [f'time() - ALERTS_FOR_STATE{{audience="owner", alertname="{rule.alert}"}} '
             f"> {seconds_text(rule.for_) + ' + ' if rule.for_ not in ('', '0s') else ''}{after}"
             for rule in rules]
    return "\n    or ".join(parts)


def group(groups: Sequence[RuleGroup]) -> RuleGroup:
    """The escalation rule for the owner alerts of ``groups``.

    Raises:
        ValueError: ``groups`` hold no owner alert.
    """
    rules = owner_alerts(groups)
    if not rules:
        raise ValueError("no owner alert to escalate")
    unresolved = AlertRule(
        alert=ALERT,
        expr=(f"max without (alertname, audience, severity) (\n"
              f'  label_replace(\n    {_unresolved(rules)},\n'
              f'    "{OWNER_ALERT}", "$1", "alertname", "(.+)")\n'
              ")\n"),
        for_="0s",
        severity="warning",
        audience="operator",
        summary="An owner was told about their GPU use and has not acted.",
        description=(
            f"{{{{ $labels.{OWNER_ALERT} }}}} about {_OWNER_TEXT}"
            "{{ with $labels.instance }} on " + HOST_TEXT + "{{ end }}"
            "{{ with $labels.gpu }} (GPU {{ . }}){{ end }} has been active for "
            "{{ $value | humanizeDuration }} (firing for more than "
            f"{thresholds.OWNER_ESCALATE_AFTER}): its owner was notified and the cause is still "
            "there. Talk to them, or end the workload (commands below)."
        ),
        details=(
            ("processes", owners.process_list(owners.all_processes(), idle=True)),
            ("commands", owners.commands(owners.all_processes())),
        ),
        when=(
            f"an owner alert has been firing for {thresholds.OWNER_ESCALATE_AFTER} "
            "(`OWNER_ESCALATE_AFTER`): its owner was told and did not act; the owner alert's "
            "labels, its name in `owner_alert` (routed to the lab lead)"
        ),
        live=not_live("an owner alert must fire for a day first: the notification end-to-end "
                      "test (tests/dashboards/test_notifications_e2e.py) shortens it"),
        runbook=_RUNBOOK,
    )
    return RuleGroup(GROUP, (unresolved,))
