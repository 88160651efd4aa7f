"""Cost: GPU time and energy priced per user, namespace/pod, Slurm job and team.

Only a site that sets prices (``exporter.catalogue.settings``: per GPU-hour by model, per kWh,
a currency) gets this group; without prices there is no rule and no cost series, never a zero.
It runs every ``records.INTERVAL``, like the accounting group whose records it prices:

- ``instance:gpu_price_per_gpu_hour:avg``: per scrape target, the mean price of its GPUs, each
  priced by the first pattern its ``gpu_info`` model name matches (else the default price; a
  GPU of an unpriced model has no price and adds none);
- per level (user, namespace/pod, job; team with a team mapping): held, used and idle cost per
  second, each accounting record times the target's price per GPU-hour / 3600, and energy cost
  per second, the attributed power times the price per kWh / 3.6e6 (per user from its record;
  per pod and job from the energy counter, which the accounting group records per user only);
- with a team mapping: one static ``gpu_team_info`` series per entry and the team's accounting
  quantities per host, each row given to the team of its pod's namespace, else of its user,
  else to ``unassigned``.

Every cost record carries the prices' ``currency`` label. Each reads one series per owner and
host (the team records read the counters, one per row), so the group costs about what the
accounting group costs, and the dashboards sum the per-host records. The Helm chart builds
the same group from its values (``templates/_settings.tpl``); ``tests/deploy/
test_chart_settings.py`` compares the two.
"""

from __future__ import annotations

from dataclasses import dataclass

from dashboards.accounting import COUNTERS, level_rate
from dashboards.promql import num
from dashboards.rules import RecordingRule, RuleGroup
from dashboards.settings import token
from exporter.catalogue import metrics, records
from exporter.catalogue.metrics import accounting as counters
from exporter.catalogue.settings import Prices, Settings, Teams
from exporter.catalogue.workloads import KINDS, KUBERNETES, group_by_names

__all__ = ["PRICED", "Priced", "chart_group", "groups", "price_chain"]

HOUR_SECONDS = 3600
KWH_JOULES = 3_600_000
NAMESPACE = KUBERNETES.group_by[0]
CURRENCY = records.CURRENCY_LABEL


@dataclass(frozen=True, slots=True)
class Priced:
    """How the rules print a site's prices: ``currency``; ``chain`` the PromQL that prices each
    GPU by model (None: GPU time is not priced); ``kwh`` the price per kWh (None: energy is
    not priced); ``teams`` whether the team records exist, with ``team_infos`` their mapping."""

    currency: str
    chain: str | None
    kwh: str | None
    teams: bool
    team_infos: tuple[RecordingRule, ...] = ()


def price_chain(prices: Prices) -> str | None:
    """Per GPU its price per GPU-hour: the first pattern its model name matches, else the
    default (None when GPU time has no price)."""
    info = metrics.GPU_INFO.name
    parts = [f'{info}{{name=~"{entry.model}"}} * 0 + {num(entry.price)}'
             for entry in prices.gpu_hour]
    if prices.default_gpu_hour is not None:
        parts.append(f"{info} * 0 + {num(prices.default_gpu_hour)}")
    return " or ".join(parts) or None


def team_infos(teams: Teams) -> tuple[RecordingRule, ...]:
    """One static series per entry of the mapping (users first, then namespaces, by name)."""
    return (*(RecordingRule(records.TEAM_INFO, "vector(1)",
                            (("user", user), (records.TEAM_LABEL, team)))
              for user, team in sorted(teams.users.items())),
            *(RecordingRule(records.TEAM_INFO, "vector(1)",
                            ((NAMESPACE, namespace), (records.TEAM_LABEL, team)))
              for namespace, team in sorted(teams.namespaces.items())))


def _team_rate(counter: metrics.Metric) -> str:
    """``counter``'s rate per team and host: a row goes to its namespace's team, else to its
    user's, else to the unassigned team."""
    rate = f"rate({counter.name}[{records.RATE_WINDOW}])"
    team = records.TEAM_LABEL
    by_namespace = f'{records.TEAM_INFO}{{{NAMESPACE}!=""}}'
    by_user = f'{records.TEAM_INFO}{{user!=""}}'
    drop = ", ".join(("user", *group_by_names(KINDS)))
    return (
        f"sum without ({drop}) (\n"
        f"  {rate} * on ({NAMESPACE}) group_left ({team}) {by_namespace}\n"
        f"  or ({rate} unless on ({NAMESPACE}) {by_namespace})"
        f" * on (user) group_left ({team}) {by_user}\n"
        f"  or label_replace({rate} unless on ({NAMESPACE}) {by_namespace}"
        f' unless on (user) {by_user}, "{team}", "{records.UNASSIGNED_TEAM}", "", "")\n'
        ")\n"
    )


def _energy_rate(level: records.Level) -> str:
    """Attributed power (watts) at ``level``: its record where the accounting group keeps
    one, else the energy counter's rate."""
    if level in (records.USER, records.TEAM):
        return level.record(records.POWER)
    return level_rate(level, counters.ATTRIBUTED_ENERGY)


def rules(priced: Priced) -> tuple[RecordingRule, ...]:
    """The cost group's rules, in evaluation order."""
    currency = ((CURRENCY, priced.currency),)
    out: list[RecordingRule] = list(priced.team_infos)
    if priced.chain is not None:
        own = ", ".join(metrics.GPU_INFO.labels)
        out.append(RecordingRule(records.PRICE_RECORD, f"avg without ({own}) ({priced.chain})",
                                 currency))
    levels = list(records.LEVELS)
    if priced.teams:
        out += [RecordingRule(records.TEAM.record(q), _team_rate(COUNTERS[q]))
                for q in records.TEAM_QUANTITIES]
        levels.append(records.TEAM)
    for level in levels:
        if priced.chain is not None:
            ignored = ", ".join((*level.keeps, CURRENCY))
            out += [RecordingRule(
                level.record(cost),
                f"{level.record(quantity)} * ignoring ({ignored}) group_left ({CURRENCY}) "
                f"{records.PRICE_RECORD} / {HOUR_SECONDS}")
                for cost, quantity in records.GPU_COSTS.items()]
        if priced.kwh is not None:
            out.append(RecordingRule(level.record(records.ENERGY_COST),
                                     f"{_energy_rate(level)} * {priced.kwh} / {KWH_JOULES}",
                                     currency))
    return tuple(out)


def groups(site: Settings) -> tuple[RuleGroup, ...]:
    """The cost group for ``site``'s prices (none without prices)."""
    prices = site.prices
    if prices is None:
        return ()
    priced = Priced(prices.currency, price_chain(prices),
                    None if prices.kwh is None else num(prices.kwh), bool(site.teams),
                    team_infos(site.teams))
    return (RuleGroup(records.COST_GROUP, rules(priced), interval=records.INTERVAL),)


#: The chart's copy: every rule, the prices as placeholders, no team entries (the chart's
#: template adds the mapping's series first and leaves out the rules its values do not price).
PRICED = Priced(token("currency"), token("gpuHourPrices"), token("kwhPrice"), teams=True)


def chart_group() -> RuleGroup:
    """The cost group as the Helm chart ships it (``PRICED``)."""
    return RuleGroup(records.COST_GROUP, rules(PRICED), interval=records.INTERVAL)


#: Alert labels the cost records do not carry (a GPU's, a container's, the alert's own).
NOT_OWNER_LABELS = ("gpu", "uuid", "name", "hostname", "device_id", "gpu_instance", "resource",
                    "sharing", "reason", "container", "pid", "process", "uid", "owner_alert",
                    "alertname", "audience", "severity", "__name__")


def idle_cost_note(alert: str, level: records.Level) -> str:
    """The ``cost`` annotation of an owner alert about an idle hold: what the owner's idle
    GPU time at ``level`` has cost since the alert first became pending
    (``ALERTS_FOR_STATE``), in the cost records' currency; empty without prices (no cost
    records) or in its first minute. Two queries per active alert and evaluation."""
    skip = "|".join(NOT_OWNER_LABELS)
    matchers = (
        '{{ $m := "" }}{{ range $k, $v := $labels }}'
        f'{{{{ if not (match "^({skip})$" $k) }}}}'
        '{{ $m = printf "%s%s=%q," $m $k $v }}{{ end }}{{ end }}'
    )
    since = (f'{{{{ with printf "max(time() - ALERTS_FOR_STATE{{alertname=\\"{alert}\\",%s}})" '
             "$m | query }}{{ $since := . | first | value }}{{ if ge $since 60.0 }}")
    amount = (f'{{{{ with printf "sum by ({CURRENCY}) (sum_over_time('
              f'{level.record(records.IDLE_COST)}{{%s}}[%.0fs])) * {records.INTERVAL_SECONDS}" '
              "$m $since | query }}{{ with . | first }}")
    text = ("The idle hold has cost {{ printf \"%.2f\" .Value }} {{ .Labels.currency }} so far "
            "({{ $since | humanizeDuration }}, at this site's prices).")
    return matchers + since + amount + text + "{{ end }}{{ end }}{{ end }}{{ end }}"
