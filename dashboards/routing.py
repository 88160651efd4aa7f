"""How gpu-exporter's alerts reach people: the routing design, as data.

One source for the Alertmanager configuration ``dashboards.alertmanager`` writes and for the
Helm chart's namespaced ``AlertmanagerConfig`` objects (``routing_file``: the chart reads it):

- owner alerts (``audience="owner"``) go to their owner, grouped per owner and node: the user's
  address (``user@domain``, or an override), or the team address of the pod's namespace; an
  owner alert whose owner cannot be mailed (``root``, ``unknown``, a bare uid, no contact) goes
  to the operator. Owners are reminded once a day, never sent "resolved" mail;
- the escalation (``escalation.ALERT``: an owner alert firing for
  ``thresholds.OWNER_ESCALATE_AFTER``) goes to the lab lead (per team, else the site's);
- operator alerts go to the operator, grouped per alert and host, with resolved notices;
- inhibition: a GPU down or missing silences that GPU's other alerts; an exporter down or
  blind silences its target's; critical silences warning or info of the same alert and GPU
  (and the critical temperature and row-remap failure their milder forms); a user's idle
  processes silence the milder idle-memory alerts of that user, and their escalations alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from dashboards import escalation

#: Receiver names; the templates pick the message's wording by prefix (gpu-owner, gpu-lead).
OPERATOR = "gpu-operator"
LEAD = "gpu-lead"
OWNER = "gpu-owner"

#: One notification per owner and node (alerts raised per user across the fleet carry no node).
OWNER_GROUP_BY = ("user", "namespace", "slurm_job", "instance", "node")
LEAD_GROUP_BY = ("user", "namespace", "slurm_job")
OPERATOR_GROUP_BY = ("alertname", "cluster", "instance")

#: Users that are not people: never mailed as ``user@domain`` (numeric uids neither).
NOT_PEOPLE = ("root", "nobody", "unknown", "__overflow__")
#: The ``user`` values no mail goes to: empty, a bare uid, or one of ``not_people``.
NUMERIC = "[0-9]+"


@dataclass(frozen=True, slots=True)
class Timing:
    """Alertmanager's grouping and repeat timings for one kind of receiver."""

    group_wait: str
    group_interval: str
    repeat_interval: str

    def route_fields(self) -> dict[str, str]:
        """As keys of an Alertmanager route."""
        return {"group_wait": self.group_wait, "group_interval": self.group_interval,
                "repeat_interval": self.repeat_interval}


#: Owners: gather a user's alerts for 5 minutes, tell them about new ones at most hourly,
#: remind them daily (reminded, not spammed). Leads alike. Operators: quickly, every 4 h.
TIMINGS: dict[str, Timing] = {
    "owner": Timing("5m", "1h", "24h"),
    "lead": Timing("5m", "1h", "24h"),
    "operator": Timing("30s", "5m", "4h"),
}
#: Resolved notices where they help: the operator and the lead see problems end; an owner who
#: ended their job needs no mail about it.
SEND_RESOLVED = {"owner": False, "lead": True, "operator": True}


def unaddressable(not_people: tuple[str, ...] = NOT_PEOPLE) -> str:
    """The regular expression (anchored by Alertmanager) of ``user`` values never mailed."""
    return "|".join(("", *not_people, NUMERIC))


@dataclass(frozen=True, slots=True)
class Inhibition:
    """One inhibit rule: alerts matching ``target`` are muted while one matching ``source``
    with the same values of ``equal`` fires."""

    source: tuple[str, ...]
    target: tuple[str, ...]
    equal: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """As an Alertmanager ``inhibit_rules`` entry."""
        return {"source_matchers": list(self.source), "target_matchers": list(self.target),
                "equal": list(self.equal)}


_GONE = "GpuDown|GpuMissing"
_EXPORTER_DOWN = "GpuExporterDown|GpuExporterSourceDown"
_IDLE_SOURCE = "GpuProcessIdle"
_IDLE_TARGETS = "GpuUserMemoryIdle|GpuMemoryHeldIdle"
_ESCALATED = f'alertname="{escalation.ALERT}"'

INHIBITIONS: tuple[Inhibition, ...] = (
    Inhibition((f'alertname=~"{_GONE}"',),
               ('alertname=~"Gpu.+"', f'alertname!~"{_GONE}"'), ("job", "instance", "uuid")),
    Inhibition((f'alertname=~"{_EXPORTER_DOWN}"',),
               ('alertname=~"Gpu.+"', f'alertname!~"{_EXPORTER_DOWN}"'), ("job", "instance")),
    Inhibition(('alertname=~"Gpu.+"', 'severity="critical"'),
               ('alertname=~"Gpu.+"', 'severity=~"warning|info"'),
               ("alertname", "job", "instance", "uuid")),
    Inhibition(('alertname="GpuTemperatureCritical"',), ('alertname="GpuTemperatureHigh"',),
               ("job", "instance", "uuid")),
    Inhibition(('alertname="GpuRowRemapFailed"',), ('alertname="GpuRowRemapPending"',),
               ("job", "instance", "uuid")),
    Inhibition((f'alertname="{_IDLE_SOURCE}"',), (f'alertname=~"{_IDLE_TARGETS}"',),
               ("job", "user")),
    Inhibition((_ESCALATED, f'{escalation.OWNER_ALERT}="{_IDLE_SOURCE}"'),
               (_ESCALATED, f'{escalation.OWNER_ALERT}=~"{_IDLE_TARGETS}"'), ("job", "user")),
)

#: Grafana dashboard uids the notices link to (dashboards.users.UID, dashboards.workloads.UID).
USERS_DASHBOARD = "gpu-exporter-users"
WORKLOADS_DASHBOARD = "gpu-exporter-workloads"


def routing_file() -> str:
    """The design as YAML for the Helm chart's AlertmanagerConfig template (it cannot import
    Python): group_by lists, timings, the escalation alert, send_resolved."""
    data = {
        "escalationAlert": escalation.ALERT,
        "receivers": {"owner": OWNER, "lead": LEAD},
        "ownerGroupBy": list(OWNER_GROUP_BY),
        "leadGroupBy": list(LEAD_GROUP_BY),
        "timings": {kind: {"groupWait": t.group_wait, "groupInterval": t.group_interval,
                           "repeatInterval": t.repeat_interval} for kind, t in TIMINGS.items()},
        "sendResolved": dict(SEND_RESOLVED),
    }
    header = ("# Generated by `python -m dashboards.generate` from dashboards/routing.py; do not "
              "edit.\n# The chart's AlertmanagerConfig template reads it.\n")
    return header + yaml.safe_dump(data, sort_keys=False)
