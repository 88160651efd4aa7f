"""Write Alertmanager's configuration for gpu-exporter from a contacts file.

Usage (from the repository root; needs only PyYAML)::

    python -m dashboards.alertmanager CONTACTS --output-dir /etc/prometheus/gpu-exporter
    python -m dashboards.alertmanager CONTACTS --check-dir DIR   # exit 1 if DIR is stale
    python -m dashboards.alertmanager CONTACTS --output-dir DIR \
        --templates-dir /etc/alertmanager/config   # where the Prometheus Operator mounts them

It writes three files into the directory: ``alertmanager.yml`` (routes, receivers,
inhibitions: ``dashboards.routing``), ``gpu-exporter.tmpl`` (the messages, shipped in
``dashboards/notifications/``) and ``gpu-exporter-site.tmpl`` (this site's settings: its name and
the dashboard links). Alertmanager 0.25 or newer reads them (``--config.file`` pointing at
``alertmanager.yml``; the templates are found next to it). A person edits the contacts file,
never the routing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from dashboards import escalation, routing
from dashboards.contacts import Contact, Contacts, ContactsError, Team, load

HERE = Path(__file__).resolve().parent / "notifications"
#: The message templates, as shipped.
TEMPLATES = HERE / "gpu-exporter.tmpl"
CONFIG_FILE = "alertmanager.yml"
TEMPLATE_FILE = "gpu-exporter.tmpl"
SITE_FILE = "gpu-exporter-site.tmpl"

#: What each receiver's e-mail and chat message say (named templates of gpu-exporter.tmpl).
_EMAIL = {
    "headers": {"Subject": '{{ template "gpu_exporter.subject" . }}'},
    "text": '{{ template "gpu_exporter.email.text" . }}',
    "html": '{{ template "gpu_exporter.email.html" . }}',
}
_CHAT = {
    "title": '{{ template "gpu_exporter.subject" . }}',
    "text": '{{ template "gpu_exporter.chat.text" . }}',
}


def _receiver(name: str, contact: Contact, kind: str, *, to: str | None = None) -> dict[str, Any]:
    """One receiver mailing ``contact`` (or the templated address ``to``) and posting to its
    chat; ``kind`` (owner, lead, operator) picks send_resolved."""
    resolved = routing.SEND_RESOLVED[kind]
    receiver: dict[str, Any] = {"name": name}
    addresses = [to] if to else list(contact.emails)
    if addresses:
        receiver["email_configs"] = [{"to": address, "send_resolved": resolved, **_EMAIL}
                                     for address in addresses]
    if contact.chat is not None:
        chat: dict[str, Any] = {"send_resolved": resolved}
        if contact.chat.webhook_url:
            chat["api_url"] = contact.chat.webhook_url
        else:
            chat["api_url_file"] = contact.chat.webhook_url_file
        if contact.chat.channel:
            chat["channel"] = contact.chat.channel
        receiver["slack_configs"] = [{**chat, **_CHAT}]
    return receiver


def _route(receiver: str, *matchers: str, **more: Any) -> dict[str, Any]:
    route: dict[str, Any] = {"receiver": receiver}
    if matchers:
        route["matchers"] = list(matchers)
    route.update(more)
    return route


def _any_of(label: str, values: Sequence[str]) -> str:
    return f'{label}=~"{"|".join(values)}"' if len(values) > 1 else f'{label}="{values[0]}"'


def _team_routes(team: Team, receiver: str, *, members: bool) -> list[dict[str, Any]]:
    """Routes sending a team's alerts (by namespace, and by member when ``members``)."""
    routes = [_route(receiver, _any_of("namespace", team.namespaces))] if team.namespaces else []
    if members and team.members:
        routes.append(_route(receiver, _any_of("user", team.members)))
    return routes


def build(contacts: Contacts, templates_dir: str = "") -> dict[str, Any]:
    """The Alertmanager configuration for ``contacts`` as data (the templates in
    ``templates_dir``; default: next to the configuration file)."""
    timings = contacts.timings
    lead = contacts.lead or contacts.operator
    receivers = [_receiver(routing.OPERATOR, contacts.operator, "operator"),
                 _receiver(routing.LEAD, lead, "lead")]
    owner_routes: list[dict[str, Any]] = []
    lead_routes: list[dict[str, Any]] = []
    for user, contact in contacts.users.items():
        name = f"{routing.OWNER}-user-{user}"
        receivers.append(_receiver(name, contact, "owner"))
        owner_routes.append(_route(name, f'user="{user}"'))
    for team in contacts.teams:
        if team.contact is not None:
            name = f"{routing.OWNER}-team-{team.name}"
            receivers.append(_receiver(name, team.contact, "owner"))
            owner_routes += _team_routes(team, name, members=False)
        if team.lead is not None:
            name = f"{routing.LEAD}-team-{team.name}"
            receivers.append(_receiver(name, team.lead, "lead"))
            lead_routes += _team_routes(team, name, members=True)
    if contacts.email_domain:
        receivers.append({"name": routing.OWNER, "email_configs": [{
            "to": "{{ .GroupLabels.user }}@" + contacts.email_domain,
            "send_resolved": routing.SEND_RESOLVED["owner"], **_EMAIL}]})
        owner_routes.append(_route(routing.OWNER,
                                   f'user!~"{routing.unaddressable(contacts.not_people)}"'))
    escalations = _route(routing.LEAD, f'alertname="{escalation.ALERT}"',
                         group_by=list(routing.LEAD_GROUP_BY), **timings["lead"].route_fields())
    if lead_routes:
        escalations["routes"] = lead_routes
    # Owner alerts whose owner has no address fall back to the operator.
    owners = _route(routing.OPERATOR, 'audience="owner"', group_by=list(routing.OWNER_GROUP_BY),
                    **timings["owner"].route_fields())
    if owner_routes:
        owners["routes"] = owner_routes
    config: dict[str, Any] = {}
    if contacts.smtp is not None:
        smtp = contacts.smtp
        config["global"] = {"smtp_smarthost": smtp.smarthost, "smtp_from": smtp.sender,
                            "smtp_require_tls": smtp.require_tls}
        if smtp.hello:
            config["global"]["smtp_hello"] = smtp.hello
        if smtp.auth_username:
            config["global"]["smtp_auth_username"] = smtp.auth_username
        if smtp.auth_password_file:
            config["global"]["smtp_auth_password_file"] = smtp.auth_password_file
    folder = templates_dir.rstrip("/") + "/" if templates_dir else ""
    config["templates"] = [folder + TEMPLATE_FILE, folder + SITE_FILE]
    config["route"] = _route(
        routing.OPERATOR, group_by=list(routing.OPERATOR_GROUP_BY),
        **timings["operator"].route_fields(),
        routes=[escalations, owners, _route(routing.OPERATOR, 'audience="operator"')],
    )
    config["inhibit_rules"] = [rule.to_dict() for rule in routing.INHIBITIONS]
    config["receivers"] = receivers
    return config


def site_template(site_name: str, grafana_url: str) -> str:
    """This site's template settings: its name, and the dashboard link of a notice's owner
    (user: the users dashboard; namespace: the workloads dashboard; none without a Grafana URL).
    The Helm chart fills the same text (``SITE_PATTERN``) from its values."""
    return (
        "{{/* The site's settings for gpu-exporter.tmpl; written by python -m "
        "dashboards.alertmanager (or the Helm chart). */}}\n"
        f'{{{{ define "gpu_exporter.site_name" }}}}{site_name}{{{{ end }}}}\n'
        f'{{{{ define "gpu_exporter.dashboard_line" }}}}{{{{ $base := "{grafana_url}" }}}}'
        "{{ if $base }}{{ with .GroupLabels.user }}Dashboard: {{ $base }}"
        f"/d/{routing.USERS_DASHBOARD}/?var-user={{{{ . }}}}\n{{{{ else }}}}"
        "{{ with .GroupLabels.namespace }}Dashboard: {{ $base }}"
        f"/d/{routing.WORKLOADS_DASHBOARD}/?var-namespace={{{{ . }}}}\n"
        "{{ end }}{{ end }}{{ end }}{{ end }}\n"
    )


#: The site template with placeholders, for the chart (``replace`` fills them from values).
SITE_PATTERN = site_template("@SITE_NAME@", "@GRAFANA_URL@")


class _Dumper(yaml.SafeDumper):
    """Plain YAML, insertion order kept, every value written out (no anchors)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render(contacts: Contacts, source: str, templates_dir: str = "") -> dict[str, str]:
    """File name -> text of the three files for ``contacts`` (read from the file ``source``;
    ``templates_dir``: where Alertmanager will find the templates, if not next to the config)."""
    header = (f"# Generated by `python -m dashboards.alertmanager {Path(source).name}`; do not "
              "edit.\n"
              "# Edit the contacts file and run it again (docs/notifications.md).\n")
    config = yaml.dump(build(contacts, templates_dir), Dumper=_Dumper, sort_keys=False, width=4096,
                       allow_unicode=True)
    return {CONFIG_FILE: header + config,
            TEMPLATE_FILE: TEMPLATES.read_text(encoding="utf-8"),
            SITE_FILE: site_template(contacts.site_name, contacts.grafana_url)}


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: 0 written/current, 1 ``--check-dir`` found drift, 2 bad input."""
    parser = argparse.ArgumentParser(prog="python -m dashboards.alertmanager", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("contacts", type=Path, help="the contacts file (YAML)")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--output-dir", type=Path, help="write the files into this directory")
    where.add_argument("--check-dir", type=Path,
                       help="do not write; exit 1 if the files in this directory differ")
    parser.add_argument("--templates-dir", default="",
                        help="where Alertmanager reads the templates when not next to the "
                             "configuration (Prometheus Operator: /etc/alertmanager/config)")
    args = parser.parse_args(argv)
    try:
        files = render(load(args.contacts), str(args.contacts), args.templates_dir)
        if args.check_dir is not None:
            stale = [name for name, text in files.items()
                     if not (args.check_dir / name).is_file()
                     or (args.check_dir / name).read_text(encoding="utf-8") != text]
            for name in stale:
                print(f"out of date: {args.check_dir / name}", file=sys.stderr)
            return 1 if stale else 0
        args.output_dir.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (args.output_dir / name).write_text(text, encoding="utf-8")
            print(f"wrote {args.output_dir / name}")
    except ContactsError as exc:
        print(f"dashboards.alertmanager: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"dashboards.alertmanager: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
