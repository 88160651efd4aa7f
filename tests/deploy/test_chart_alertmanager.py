"""The chart's owner notifications on Kubernetes: one AlertmanagerConfig per team namespace,
built from the same routing design as the shipped Alertmanager configuration, and the message
templates in a ConfigMap that Alertmanager (amtool) renders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from dashboards import alertmanager, escalation, routing
from tests.dashboards.notify import amtool
from tests.deploy import operator_crds
from tests.deploy.helm_render import CHART_DIR, render

REPO = CHART_DIR.parents[1]
TEAMS: dict[str, Any] = {
    "enabled": True,
    "lead": "lead@example.org",
    "templates": {"siteName": "the ML cluster", "grafanaURL": "https://grafana.example.org"},
    "teams": [
        {"namespace": "vision", "email": "vision@example.org",
         "chat": {"webhookURL": {"name": "vision-chat", "key": "url"}, "channel": "#vision"}},
        {"namespace": "nlp", "email": "nlp@example.org", "lead": "nlp-lead@example.org"},
    ],
}


def _configs(values: dict[str, Any], operator: bool = True) -> dict[str, dict[str, Any]]:
    rendered = render({"alertmanagerConfig": values}, operator=operator)
    return {o["metadata"]["namespace"]: o for o in rendered.of_kind("AlertmanagerConfig")}


def test_one_valid_alertmanagerconfig_per_team_namespace() -> None:
    configs = _configs(TEAMS)
    assert sorted(configs) == ["nlp", "vision"]
    for config in configs.values():
        operator_crds.validate(config)
        assert config["apiVersion"] == "monitoring.coreos.com/v1alpha1"


def test_routes_follow_the_shipped_routing_design() -> None:
    route = _configs(TEAMS)["vision"]["spec"]["route"]
    owner = routing.TIMINGS["owner"]
    assert route["groupBy"] == list(routing.OWNER_GROUP_BY)
    assert (route["groupWait"], route["groupInterval"], route["repeatInterval"]) == (
        owner.group_wait, owner.group_interval, owner.repeat_interval)
    lead, owners = route["routes"]
    assert lead["matchers"] == [{"name": "alertname", "value": escalation.ALERT,
                                 "matchType": "="}]
    assert lead["groupBy"] == list(routing.LEAD_GROUP_BY)
    assert owners["matchers"] == [{"name": "audience", "value": "owner", "matchType": "="}]


def test_team_addresses_leads_and_resolved_notices() -> None:
    configs = _configs(TEAMS)
    vision = {r["name"]: r for r in configs["vision"]["spec"]["receivers"]}
    owner, lead = vision[routing.OWNER], vision[routing.LEAD]
    assert owner["emailConfigs"][0]["to"] == "vision@example.org"
    assert owner["emailConfigs"][0]["sendResolved"] is False
    assert owner["slackConfigs"][0]["apiURL"] == {"name": "vision-chat", "key": "url"}
    assert lead["emailConfigs"][0]["to"] == "lead@example.org"
    assert lead["emailConfigs"][0]["sendResolved"] is True
    nlp = {r["name"]: r for r in configs["nlp"]["spec"]["receivers"]}
    assert nlp[routing.LEAD]["emailConfigs"][0]["to"] == "nlp-lead@example.org"
    # Without any lead there is no escalation route.
    alone = _configs({**TEAMS, "lead": "", "teams": [TEAMS["teams"][0]]})["vision"]
    assert [r["receiver"] for r in alone["spec"]["route"]["routes"]] == [routing.OWNER]


def test_only_where_the_api_exists_or_forced() -> None:
    assert _configs(TEAMS, operator=False) == {}
    assert sorted(_configs({**TEAMS, "force": True}, operator=False)) == ["nlp", "vision"]
    assert render({}).of_kind("AlertmanagerConfig") == []


def test_a_namespace_listed_twice_fails_clearly() -> None:
    twice = {**TEAMS, "teams": [TEAMS["teams"][0], TEAMS["teams"][0]]}
    with pytest.raises(helm_python.HelmRenderError, match='namespace "vision" is listed twice'):
        render({"alertmanagerConfig": twice})


def test_bad_team_values_are_rejected_by_the_schema() -> None:
    for bad in ({"namespace": "Vision", "email": "v@example.org"},
                {"namespace": "vision"},
                {"namespace": "vision", "email": "not-an-address"}):
        with pytest.raises(helm_python.HelmValuesError):
            render({"alertmanagerConfig": {**TEAMS, "teams": [bad]}})


def _templates(tmp: Path) -> Path:
    """The chart's template ConfigMap, written out as files."""
    rendered = render({"alertmanagerConfig": TEAMS})
    (config_map,) = [o for o in rendered.of_kind("ConfigMap")
                     if o["metadata"]["name"].endswith("-alertmanager-templates")]
    for name, text in config_map["data"].items():
        (tmp / name).write_text(text)
    return tmp


def test_the_template_configmap_holds_the_shipped_templates(tmp_path: Path) -> None:
    folder = _templates(tmp_path)
    shipped = REPO / "dashboards" / "notifications" / alertmanager.TEMPLATE_FILE
    assert (folder / alertmanager.TEMPLATE_FILE).read_text() == shipped.read_text()
    assert (folder / alertmanager.SITE_FILE).read_text() == alertmanager.site_template(
        "the ML cluster", "https://grafana.example.org")


def test_alertmanager_renders_a_team_notice_with_the_charts_templates(tmp_path: Path) -> None:
    folder = _templates(tmp_path)
    # The Operator names the team's receiver <namespace>/<object>/gpu-owner.
    data = {"receiver": f"vision/gpu-gpu-exporter-owners/{routing.OWNER}", "status": "firing",
            "groupLabels": {"namespace": "vision"}, "commonLabels": {},
            "commonAnnotations": {}, "externalURL": "http://am",
            "alerts": [{"status": "firing",
                        "labels": {"alertname": "GpuAllocatedIdle", "namespace": "vision",
                                   "pod": "nb-0", "audience": "owner", "severity": "warning"},
                        "annotations": {"summary": "A pod holds an allocated GPU.",
                                        "description": "Pod vision/nb-0 idles.",
                                        "commands": "kubectl delete pod -n vision nb-0",
                                        "runbook_url": "https://example.org/r"},
                        "startsAt": "2026-03-02T09:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
                        "generatorURL": "", "fingerprint": "1"}]}
    (tmp_path / "data.json").write_text(json.dumps(data))
    result = amtool("template", "render", f"--template.glob={folder}/*.tmpl",
                    f"--template.data={tmp_path / 'data.json'}",
                    '--template.text={{ template "gpu_exporter.email.text" . }}')
    assert result.returncode == 0, result.stderr
    body = result.stdout
    assert body.startswith("Hello namespace vision,")
    assert "the monitor of the ML cluster" in body
    assert "kubectl delete pod -n vision nb-0" in body
    assert "https://grafana.example.org/d/gpu-exporter-workloads/?var-namespace=vision" in body


def _native(config: dict[str, Any]) -> dict[str, Any]:
    """An AlertmanagerConfig as the native configuration the Operator generates from it (the
    namespace matcher added), for amtool."""
    def matchers(items: list[dict[str, str]]) -> list[str]:
        return [f'{m["name"]}{m.get("matchType", "=")}"{m["value"]}"' for m in items]

    def route(r: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"receiver": r["receiver"]}
        for camel, snake in (("groupBy", "group_by"), ("groupWait", "group_wait"),
                             ("groupInterval", "group_interval"),
                             ("repeatInterval", "repeat_interval")):
            if camel in r:
                out[snake] = r[camel]
        if "matchers" in r:
            out["matchers"] = matchers(r["matchers"])
        if "routes" in r:
            out["routes"] = [route(child) for child in r["routes"]]
        return out

    def receiver(r: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"name": r["name"]}
        if "emailConfigs" in r:
            out["email_configs"] = [{
                "to": e["to"], "send_resolved": e["sendResolved"], "text": e["text"],
                "html": e["html"], "headers": {h["key"]: h["value"] for h in e["headers"]},
                "smarthost": "mail.example.org:25", "from": "gpu@example.org"}
                for e in r["emailConfigs"]]
        if "slackConfigs" in r:
            out["slack_configs"] = [{"api_url": "https://chat.example.org/hook",
                                     "send_resolved": s["sendResolved"], "title": s["title"],
                                     "text": s["text"]} for s in r["slackConfigs"]]
        return out

    top = route(config["spec"]["route"])
    namespace = config["metadata"]["namespace"]
    top["matchers"] = [f'namespace="{namespace}"', *top["matchers"]]
    top["continue"] = True
    return {"route": {"receiver": "none", "routes": [top]},
            "receivers": [receiver(r) for r in config["spec"]["receivers"]],
            "templates": ["*.tmpl"]}


def test_the_operators_translation_is_a_valid_alertmanager_config(tmp_path: Path) -> None:
    folder = _templates(tmp_path)
    native = _native(_configs(TEAMS)["vision"])
    path = folder / "alertmanager.yml"
    path.write_text(yaml.safe_dump(native))
    checked = amtool("check-config", path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for labels, receiver in (
        (["alertname=GpuAllocatedIdle", "audience=owner", "namespace=vision"], routing.OWNER),
        ([f"alertname={escalation.ALERT}", "audience=operator", "namespace=vision"],
         routing.LEAD),
        (["alertname=GpuDown", "audience=operator", "namespace=vision"], "none"),
        (["alertname=GpuAllocatedIdle", "audience=owner", "namespace=nlp"], "none"),
    ):
        result = amtool("config", "routes", "test", f"--config.file={path}", *labels)
        assert result.stdout.strip() == receiver, (labels, result.stdout, result.stderr)
