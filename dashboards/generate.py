"""The one generator: write (or check) every derived file of the repository, or a site's
rules and dashboards built with its settings.

Usage (from the repository root)::

    python -m dashboards.generate            # rewrite whatever is out of date
    python -m dashboards.generate --check    # exit 1 if a committed file differs (CI runs it)

From an install (``pip install 'gpu-exporter[generate]'``; also ``gpu-exporter-generate``)::

    python -m dashboards.generate --config settings.yaml --output site/

writes ``site/rules/*.yaml`` (the cost rules too where the settings have prices) and
``site/grafana/*.json`` with the site's thresholds, selectors, prices and teams
(``exporter.catalogue.settings``; an example: ``dashboards/settings.example.yaml``).

Derived files, all from the metric rows (``exporter.catalogue.metrics``), the flags
(``exporter.config``) and the thresholds (``exporter.catalogue.thresholds``):

- ``README.md``: the metric and flag tables between their ``BEGIN``/``END`` markers, and
  ``docs/gpu-activity.md``: its map of GPM rows to dcgm-exporter fields;
- the runbook's XID table (``dashboards.xids``) between its ``BEGIN``/``END XID TABLE`` markers;
- ``dashboards/grafana/*.json`` and ``dashboards/rules/*.yaml`` (plus
  ``dashboards/rules/tests/rules/``: the alerts without annotations, for the behaviour tests);
- ``dashboards/notifications/``: the Alertmanager configuration and site template generated
  from ``contacts.example.yaml`` (``dashboards.alertmanager``);
- ``helm/gpu-exporter/files/{dashboards,rules}/``: the chart's copies (Helm cannot read files
  outside the chart), built with the settings as placeholders its templates fill in from the
  values (``dashboards.settings``), ``files/cost/``: the cost group the same way
  (``dashboards.cost``); a copy without an original is stale and removed; and
  ``files/notifications/``: the message templates, the site template with placeholders, and
  ``routing.yaml`` (``dashboards.routing``) for its AlertmanagerConfig; the chart's
  ``values.yaml`` settings block and ``values.schema.json``'s settings
  (``dashboards.chart_settings``);
- ``dashboards/rules/tests/rules/gpu-exporter-cost.yaml``: the cost rules of
  ``dashboards/settings.example.yaml``, which ``cost.test.yaml`` tests, and docs/settings.md's
  table;
- ``dashboards/rules/pod-labels/``: the opt-in pod-label join, a template (``dashboards/
  pod_labels.py``), and its chart copy;
- ``tests/golden/*.prom``: the golden exposition of every scenario preset
  (``dashboards/golden.py``; review their diff: it is every change users will scrape).

``--root`` points at another checkout (tests use a temporary copy).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from dashboards import (
    accounting,
    alert_docs,
    alertmanager,
    alerts,
    chart_settings,
    cost,
    efficiency,
    exporter_health,
    fleet,
    node,
    pod_labels,
    recording,
    routing,
    rules,
    settings,
    users,
    workloads,
    xids,
)
from dashboards.contacts import ContactsError
from dashboards.contacts import load as load_contacts
from dashboards.golden import golden_files
from exporter.catalogue import records
from exporter.catalogue.settings import Settings, SettingsError
from exporter.docs import DOCS, DocsError, render, render_parts

REPO = Path(__file__).resolve().parent.parent

#: Dashboard file name -> builder. Paths are stable: the compose stack and Helm chart use them.
DASHBOARDS: dict[str, Callable[[], dashboard.Dashboard]] = {
    "gpu-fleet-overview.json": fleet.build,
    "gpu-node-device.json": node.build,
    "gpu-users-processes.json": users.build,
    "gpu-exporter-health.json": exporter_health.build,
    "gpu-workloads.json": workloads.build,
    "gpu-efficiency.json": efficiency.build,
}
ALERTS_FILE = "gpu-exporter-alerts.yaml"
RECORDING_FILE = "gpu-exporter-recording.yaml"
ACCOUNTING_FILE = records.RULE_FILE
COST_FILE = records.COST_RULE_FILE
RUNBOOK = f"dashboards/runbooks/{rules.RUNBOOK_FILE}"
#: dashboards/README.md, whose alert table follows from the rules.
ALERTS_README = "dashboards/README.md"
#: The chart's values and schema, whose settings the generator writes.
CHART_VALUES = "helm/gpu-exporter/values.yaml"
CHART_SCHEMA = "helm/gpu-exporter/values.schema.json"
#: The example settings, and the cost rules built from them that the promtool tests load.
SETTINGS_EXAMPLE = "dashboards/settings.example.yaml"
SETTINGS_DOC = "docs/settings.md"
#: The hand-written files the generator reads and fills in (between their BEGIN/END markers),
#: and the example settings it builds the cost rule tests' rules from.
TEMPLATES = (*DOCS, ALERTS_README, RUNBOOK, SETTINGS_DOC, CHART_VALUES, CHART_SCHEMA,
             SETTINGS_EXAMPLE)
#: The alert rules without annotations, which the behaviour rule tests load (``rule_files``).
BEHAVIOUR_RULES = f"dashboards/rules/tests/rules/{ALERTS_FILE}"
#: The example contacts file the shipped Alertmanager configuration is generated from.
NOTIFICATIONS = "dashboards/notifications"
CONTACTS_EXAMPLE = f"{NOTIFICATIONS}/contacts.example.yaml"
#: Where the chart keeps its copies: generated folder -> chart folder.
CHART_COPIES = {
    "dashboards/grafana": "helm/gpu-exporter/files/dashboards",
    "dashboards/rules": "helm/gpu-exporter/files/rules",
}
#: What the chart's AlertmanagerConfig template reads: the routing design and the messages.
CHART_NOTIFICATIONS = "helm/gpu-exporter/files/notifications"
#: The chart's cost group (outside files/rules/: included only with prices in the values).
CHART_COST = f"helm/gpu-exporter/files/cost/{COST_FILE}"
EXAMPLE_COST_RULES = f"dashboards/rules/tests/rules/{COST_FILE}"


def dashboard_json(build: Callable[[], dashboard.Dashboard]) -> str:
    """One dashboard as classic JSON text (sorted keys, two-space indent, final newline)."""
    with warnings.catch_warnings():
        # The classic builders warn that v2 exists; provisioning and the sidecar need classic.
        warnings.simplefilter("ignore", DeprecationWarning)
        model = build().build()
    return JSONEncoder(sort_keys=True, indent=2).encode(model) + "\n"


def rule_files() -> dict[str, str]:
    """The rule files under the settings in force (file name -> text); the cost file only
    with prices."""
    files = {
        ALERTS_FILE: rules.render(alerts.groups(), "alerts.py"),
        RECORDING_FILE: rules.render(recording.groups(), "recording.py"),
        ACCOUNTING_FILE: rules.render(accounting.groups(), "accounting.py"),
    }
    priced = cost.groups(settings.current())
    if priced:
        files[COST_FILE] = rules.render(priced, "cost.py")
    return files


def dashboard_files() -> dict[str, str]:
    """Every dashboard under the settings in force (file name -> JSON text)."""
    return {name: dashboard_json(build) for name, build in DASHBOARDS.items()}


def site_outputs(site: Settings) -> dict[str, str]:
    """A site's rules and dashboards built with its settings, as path -> content (the rules
    under ``rules/``, the dashboards under ``grafana/``)."""
    with settings.applied(site):
        files = {f"rules/{name}": text for name, text in rule_files().items()}
        files.update({f"grafana/{name}": text for name, text in dashboard_files().items()})
    return files


def _chart_files(root: Path) -> dict[str, str]:
    """The chart's copies of the rules and dashboards, with the settings as placeholders, its
    cost group, and its values' settings block and schema."""
    with settings.placeholders():
        files = {f"{CHART_COPIES['dashboards/rules']}/{name}": text
                 for name, text in rule_files().items()}
        files[CHART_COST] = rules.render((cost.chart_group(),), "cost.py")
    with settings.chart_dashboards():
        files.update({f"{CHART_COPIES['dashboards/grafana']}/{name}": text
                      for name, text in dashboard_files().items()})
    files[CHART_VALUES] = chart_settings.render_values(
        (root / CHART_VALUES).read_text(encoding="utf-8"))
    files[CHART_SCHEMA] = chart_settings.render_schema(
        (root / CHART_SCHEMA).read_text(encoding="utf-8"))
    return files


def outputs(root: Path) -> dict[str, str]:
    """Every generated file, as path relative to ``root`` -> content.

    Raises:
        OSError: the README cannot be read.
        DocsError: the README lacks a table marker pair.
        ContactsError: the example contacts file is wrong.
        SettingsError: the example settings file is wrong.
    """
    files = {f"dashboards/grafana/{name}": text for name, text in dashboard_files().items()}
    files.update({f"dashboards/rules/{name}": text for name, text in rule_files().items()})
    notices = alertmanager.render(load_contacts(root / CONTACTS_EXAMPLE), CONTACTS_EXAMPLE)
    files.update({f"{NOTIFICATIONS}/{name}": text for name, text in notices.items()})
    files[f"{CHART_NOTIFICATIONS}/routing.yaml"] = routing.routing_file()
    template = alertmanager.TEMPLATE_FILE
    files[f"{CHART_NOTIFICATIONS}/{template}"] = notices[template]
    files[f"{CHART_NOTIFICATIONS}/{alertmanager.SITE_FILE}.in"] = alertmanager.SITE_PATTERN
    files.update(_chart_files(root))
    files[BEHAVIOUR_RULES] = rules.render(alerts.groups(), "alerts.py", annotations=False)
    example = settings.load(root / SETTINGS_EXAMPLE)
    files[EXAMPLE_COST_RULES] = rules.render(cost.groups(example), "cost.py")
    files[pod_labels.TEMPLATE] = files[pod_labels.CHART_TEMPLATE] = pod_labels.template()
    files.update(golden_files())
    for doc in DOCS:
        files[doc] = render(doc, (root / doc).read_text(encoding="utf-8"))
    files[RUNBOOK] = render_parts((root / RUNBOOK).read_text(encoding="utf-8"), {
        "ALERT SECTIONS": alert_docs.runbook_sections(), "XID TABLE": xids.markdown_table()})
    files[ALERTS_README] = render_parts((root / ALERTS_README).read_text(encoding="utf-8"),
                                        {"ALERTS TABLE": alert_docs.alerts_table()})
    files[SETTINGS_DOC] = render_parts((root / SETTINGS_DOC).read_text(encoding="utf-8"),
                                       {"SETTINGS TABLE": chart_settings.settings_table()})
    return files


def stale_copies(root: Path, wanted: dict[str, str]) -> list[str]:
    """Files in the chart's copy folders that no generated file accounts for."""
    extra = []
    for copy in CHART_COPIES.values():
        folder = root / copy
        if folder.is_dir():
            extra += [f"{copy}/{p.name}" for p in sorted(folder.iterdir())
                      if p.is_file() and f"{copy}/{p.name}" not in wanted]
    return extra


def stale_files(root: Path) -> list[str]:
    """Generated files missing under ``root`` or differing, then stale chart copies."""
    wanted = outputs(root)
    stale = [rel for rel, text in wanted.items()
             if not (root / rel).is_file() or (root / rel).read_text(encoding="utf-8") != text]
    return stale + stale_copies(root, wanted)


def write(root: Path) -> list[str]:
    """Bring every derived file under ``root`` up to date; returns what changed.

    Raises:
        OSError: a file cannot be written.
        DocsError: the README lacks a table marker pair.
    """
    wanted = outputs(root)
    changed = stale_files(root)
    for rel in changed:
        path = root / rel
        if rel in wanted:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(wanted[rel], encoding="utf-8")
        else:
            path.unlink()
    return changed


def write_site(site: Settings, output: Path) -> list[str]:
    """Write a site's rules and dashboards under ``output``; returns what was written.

    Raises:
        OSError: a file cannot be written.
    """
    written = []
    for rel, text in site_outputs(site).items():
        path = output / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(str(path))
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: 0 done/current, 1 ``--check`` found drift, 2 unusable tree,
    settings file or output."""
    parser = argparse.ArgumentParser(prog="python -m dashboards.generate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if a committed file is out of date")
    parser.add_argument("--root", type=Path, default=REPO,
                        help="the repository checkout to write or check (default: this one)")
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="a site's settings (thresholds, selectors, prices, teams): build "
                        "its rules and dashboards into --output")
    parser.add_argument("--output", type=Path, metavar="DIR",
                        help="with --config: the directory to write rules/ and grafana/ into")
    args = parser.parse_args(argv)
    if (args.config is None) != (args.output is None):
        parser.error("--config and --output go together")
    if args.config is not None and args.check:
        parser.error("--check checks the repository; it takes no --config")
    try:
        if args.config is not None:
            for path in write_site(settings.load(args.config), args.output):
                print(f"wrote {path}")
            return 0
        if args.check:
            stale = stale_files(args.root)
            for rel in stale:
                print(f"out of date: {rel} (run python -m dashboards.generate)", file=sys.stderr)
            return 1 if stale else 0
        for rel in write(args.root):
            print(f"updated {rel}")
    except (OSError, UnicodeDecodeError, DocsError, ContactsError, SettingsError,
            chart_settings.SettingsMarkerError) as exc:
        print(f"dashboards.generate: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
