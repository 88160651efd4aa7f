"""What follows from the alert rules besides the rule files: the runbook's section of each alert
and dashboards/README.md's alert table, from each ``AlertRule``'s ``runbook`` and ``when``.

``python -m dashboards.generate`` puts them between the ``ALERT SECTIONS`` markers of the
runbook and the ``ALERTS TABLE`` markers of the README; an alert is documented where it is
declared, and nothing else is edited by hand to add one (dashboards/README.md, "Adding an
alert").
"""

from __future__ import annotations

from dashboards import alerts
from dashboards.rules import AlertRule


def _alerts() -> list[tuple[str, AlertRule]]:
    """Every alert with its group's name, in rule-file order."""
    return [(group.name, rule) for group in alerts.groups() for rule in group.rules
            if isinstance(rule, AlertRule)]


def runbook_sections() -> str:
    """One ``## <alert>`` section per alert, in rule-file order (its heading is the anchor of
    the alert's ``runbook_url``)."""
    return "\n\n".join(f"## {rule.alert}\n\n{rule.runbook.strip()}" for _, rule in _alerts())


def alerts_table() -> str:
    """dashboards/README.md's table: group, alert, severity, audience and when it fires, per
    alert."""
    lines = ["| group | alert | severity | audience | fires when (defaults) |",
             "|---|---|---|---|---|"]
    seen: set[str] = set()
    for group, rule in _alerts():
        shown = "| |" if group in seen else f"| `{group}` |"
        seen.add(group)
        lines.append(f"{shown} `{rule.alert}` | {rule.severity} | {rule.audience} | {rule.when} |")
    return "\n".join(lines)
