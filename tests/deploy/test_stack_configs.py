"""The compose stack's Prometheus and Grafana configuration, checked against the real files."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.deploy.stack import (
    DOCKER,
    bind_mounts,
    dashboard_files,
    host_path,
    rule_files,
    service,
    with_defaults,
)

PROVISIONING = DOCKER / "grafana" / "provisioning"
PROMETHEUS_HOME = "/etc/prometheus"

def _provisioning(items: str, item: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A Grafana provisioning file: ``apiVersion: 1`` and a non-empty list ``items``."""
    return {
        "type": "object",
        "required": ["apiVersion", items],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": 1},
            items: {"type": "array", "minItems": 1, "items": {"type": "object", **item}},
            **extra,
        },
    }


#: Grafana's file provisioning formats (administration/provisioning): required keys and types.
DATASOURCES_SCHEMA = _provisioning("datasources", {
    "required": ["name", "type", "access", "url", "uid"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "type": {"type": "string"},
        "access": {"enum": ["proxy", "direct"]},
        "url": {"type": "string", "pattern": "^https?://"},
        "uid": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,40}$"},
        "orgId": {"type": "integer"},
        "isDefault": {"type": "boolean"},
        "editable": {"type": "boolean"},
        "jsonData": {"type": "object"},
        "secureJsonData": {"type": "object"},
    },
}, deleteDatasources={"type": "array"}, prune={"type": "boolean"})
DASHBOARD_PROVIDERS_SCHEMA = _provisioning("providers", {
    "required": ["name", "type", "options"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "orgId": {"type": "integer"},
        "folder": {"type": "string"},
        "folderUid": {"type": "string"},
        "type": {"const": "file"},
        "disableDeletion": {"type": "boolean"},
        "updateIntervalSeconds": {"type": "integer", "minimum": 1},
        "allowUiUpdates": {"type": "boolean"},
        "options": {
            "type": "object",
            "required": ["path"],
            "additionalProperties": False,
            "properties": {
                "path": {"type": "string", "pattern": "^/"},
                "foldersFromFilesStructure": {"type": "boolean"},
            },
        },
    },
})


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data


def _datasources() -> list[dict[str, Any]]:
    files = sorted((PROVISIONING / "datasources").glob("*.yaml"))
    assert files
    return [ds for f in files for ds in _load(f)["datasources"]]


@pytest.mark.slow
def test_promtool_accepts_the_config_with_the_real_rules(tmp_path: Path) -> None:
    """promtool in a directory laid out like the container's /etc/prometheus mounts."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: install Debian's prometheus package (scripts/test does)"
    mounted = 0
    for mount in bind_mounts("prometheus"):
        target = mount["target"]
        if target.startswith(PROMETHEUS_HOME + "/"):
            place = tmp_path / target.removeprefix(PROMETHEUS_HOME + "/")
            place.parent.mkdir(parents=True, exist_ok=True)
            place.symlink_to(host_path(mount["source"]))
            mounted += 1
    assert mounted == 2
    result = subprocess.run([promtool, "check", "config", "prometheus.yml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"SUCCESS: {len(rule_files())} rule files found" in output
    for path in rule_files():
        block = output.split(f"Checking rules/{path.name}", 1)
        assert len(block) == 2, f"promtool did not load {path.name}:\n{output}"
        assert block[1].lstrip().startswith("SUCCESS"), output


def test_prometheus_scrapes_the_exporter() -> None:
    config = _load(DOCKER / "prometheus" / "prometheus.yml")
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    exporter = jobs["gpu-exporter"]
    assert exporter["metrics_path"] == "/metrics"
    assert config["rule_files"] == ["rules/*.yaml"]
    assert any(f.name.endswith(".yaml") for f in rule_files())


def test_datasource_provisioning_is_valid() -> None:
    for path in sorted((PROVISIONING / "datasources").glob("*.yaml")):
        jsonschema.validate(_load(path), DATASOURCES_SCHEMA)
    (prometheus,) = _datasources()
    assert prometheus["type"] == "prometheus"
    assert prometheus["isDefault"] is True
    # The URL names the compose service and the port Prometheus listens on.
    assert prometheus["url"] == "http://prometheus:9090"
    assert "127.0.0.1:9090:9090" in [with_defaults(p) for p in service("prometheus")["ports"]]


def test_dashboard_provisioning_points_at_the_mounted_dashboards() -> None:
    files = sorted((PROVISIONING / "dashboards").glob("*.yaml"))
    assert files
    paths = []
    for path in files:
        data = _load(path)
        jsonschema.validate(data, DASHBOARD_PROVIDERS_SCHEMA)
        paths += [p["options"]["path"] for p in data["providers"]]
    mounted = {m["target"]: host_path(m["source"]) for m in bind_mounts("grafana")}
    for path in paths:
        assert path in mounted, f"provider path {path} is not mounted"
        assert {p.name for p in mounted[path].glob("*.json")} == {
            p.name for p in dashboard_files()}


def test_schemas_reject_broken_provisioning() -> None:
    with pytest.raises(jsonschema.ValidationError, match="'uid' is a required property"):
        jsonschema.validate({"apiVersion": 1, "datasources": [
            {"name": "P", "type": "prometheus", "access": "proxy", "url": "http://p:9090"}]},
            DATASOURCES_SCHEMA)
    with pytest.raises(jsonschema.ValidationError, match="'path' is a required property"):
        jsonschema.validate({"apiVersion": 1, "providers": [
            {"name": "x", "type": "file", "options": {}}]}, DASHBOARD_PROVIDERS_SCHEMA)


def _datasource_refs(node: Any) -> list[Any]:
    if isinstance(node, dict):
        found = [node["datasource"]] if "datasource" in node else []
        return found + [r for v in node.values() for r in _datasource_refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _datasource_refs(v)]
    return []


@pytest.mark.parametrize("path", dashboard_files(), ids=lambda p: p.name)
def test_dashboards_resolve_to_the_provisioned_datasource(path: Path) -> None:
    """A `datasource` variable of type prometheus; every panel uses it or our uid."""
    dashboard = json.loads(path.read_text(encoding="utf-8"))
    assert "__inputs" not in dashboard  # only the UI import flow resolves those
    variables = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert len(variables) == 1
    variable = variables[0]
    assert variable["query"] == "prometheus"
    uids = {ds["uid"] for ds in _datasources()}
    names = {ds["name"] for ds in _datasources()}
    current = (variable.get("current") or {}).get("value")
    assert current in (None, "", "default", *uids, *names)
    name = variable["name"]
    allowed = {f"${{{name}}}", f"${name}", *uids}
    refs = [r for r in _datasource_refs(dashboard) if r is not variable.get("datasource")]
    assert refs
    for ref in refs:
        uid = ref.get("uid") if isinstance(ref, dict) else ref
        assert uid in allowed, f"{path.name}: datasource {ref!r} is neither ${name} nor ours"
