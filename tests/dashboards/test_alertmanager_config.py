"""The shipped Alertmanager configuration: valid for amtool, every route tested, the templates
render what a person needs, the inhibitions mute what they should (in a real Alertmanager), and
a wrong contacts file gets a clear error."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import alertmanager, contacts, escalation, routing
from tests.dashboards.notify import (
    alertmanager_running,
    amtool,
    lab_contacts,
    post_alerts,
    sinks,
    write_config,
)

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "dashboards" / "notifications"
CONFIG = SHIPPED / alertmanager.CONFIG_FILE
EXAMPLE = SHIPPED / "contacts.example.yaml"

#: (labels, receiver) for the shipped example: every route of its tree, and the fallbacks.
ROUTE_CASES: list[tuple[dict[str, str], str]] = [
    # Owners: their own address, an override, a team's namespace; not-people to the operator.
    ({"alertname": "GpuProcessIdle", "audience": "owner", "user": "bob"}, "gpu-owner"),
    ({"alertname": "GpuProcessIdle", "audience": "owner", "user": "alice"},
     "gpu-owner-user-alice"),
    ({"alertname": "GpuMemoryExhaustionForecast", "audience": "owner", "user": "svc-infer",
      "instance": "infer-02:9400", "gpu": "0"}, "gpu-owner-user-svc-infer"),
    ({"alertname": "GpuAllocatedIdle", "audience": "owner", "namespace": "vision-dev",
      "pod": "nb-0"}, "gpu-owner-team-vision"),
    ({"alertname": "GpuAllocatedIdle", "audience": "owner", "namespace": "other",
      "pod": "nb-0"}, "gpu-operator"),
    ({"alertname": "GpuProcessIdle", "audience": "owner", "user": "root"}, "gpu-operator"),
    ({"alertname": "GpuUserMemoryIdle", "audience": "owner", "user": "1000"}, "gpu-operator"),
    ({"alertname": "GpuMemoryHeldIdle", "audience": "owner", "gpu": "2"}, "gpu-operator"),
    # Escalations: the team's lead by namespace or member, else the site's lead.
    ({"alertname": escalation.ALERT, "audience": "operator", "user": "bob",
      "owner_alert": "GpuProcessIdle"}, "gpu-lead"),
    ({"alertname": escalation.ALERT, "audience": "operator", "user": "dave",
      "owner_alert": "GpuProcessIdle"}, "gpu-lead-team-vision"),
    ({"alertname": escalation.ALERT, "audience": "operator", "namespace": "vision",
      "pod": "nb-0", "owner_alert": "GpuAllocatedIdle"}, "gpu-lead-team-vision"),
    # Operators.
    ({"alertname": "GpuDown", "audience": "operator", "severity": "critical"}, "gpu-operator"),
    ({"alertname": "SomethingElse"}, "gpu-operator"),
]


def _routes_test(config: Path, labels: dict[str, str]) -> tuple[str, str]:
    """(receiver, the matched route's line of amtool's tree) for one label set."""
    pairs = [f"{k}={v}" for k, v in labels.items()]
    result = amtool("config", "routes", "test", f"--config.file={config}", "--tree", *pairs)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    return lines[-1].strip(), lines[-2].split("── ", 1)[1]


def test_shipped_configuration_is_current_and_valid() -> None:
    assert alertmanager.main([str(EXAMPLE), "--check-dir", str(SHIPPED)]) == 0
    result = amtool("check-config", CONFIG)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 templates" in result.stdout
    assert f"{len(routing.INHIBITIONS)} inhibit rules" in result.stdout


def test_every_route_has_a_case_and_routes_as_designed() -> None:
    tree = amtool("config", "routes", f"--config.file={CONFIG}")
    assert tree.returncode == 0, tree.stderr
    routes = {line.split("── ", 1)[1].strip() for line in tree.stdout.splitlines()
              if "── " in line and "{" in line}
    matched = set()
    for labels, receiver in ROUTE_CASES:
        got, route = _routes_test(CONFIG, labels)
        assert got == receiver, (labels, got)
        matched.add(route.strip())
    assert routes - matched == set(), "routes without a case"


def test_a_minimal_contacts_file_sends_everything_to_the_operator(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"operator": {"chat": {
        "webhook_url": "http://127.0.0.1:9/hook"}}})
    assert amtool("check-config", config).returncode == 0
    for labels in ({"audience": "owner", "user": "bob", "alertname": "GpuProcessIdle"},
                   {"audience": "operator", "alertname": "GpuDown"},
                   {"alertname": escalation.ALERT, "user": "bob"}):
        receiver, _ = _routes_test(config, labels)
        assert receiver in (routing.OPERATOR, routing.LEAD), labels
    receivers = yaml.safe_load(config.read_text())["receivers"]
    assert [r["name"] for r in receivers] == [routing.OPERATOR, routing.LEAD]


def _data(receiver: str, alerts: list[dict[str, Any]], group: dict[str, str],
          status: str = "firing") -> dict[str, Any]:
    return {"receiver": receiver, "status": status, "alerts": alerts, "groupLabels": group,
            "commonLabels": alerts[0]["labels"], "commonAnnotations": {},
            "externalURL": "http://alertmanager:9093"}


def _alert(labels: dict[str, str], annotations: dict[str, str],
           status: str = "firing") -> dict[str, Any]:
    return {"status": status, "labels": labels, "annotations": annotations,
            "startsAt": "2026-03-02T09:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph", "fingerprint": "0123456789abcdef"}


IDLE = _alert(
    {"alertname": "GpuProcessIdle", "audience": "owner", "severity": "warning", "user": "alice",
     "job": "gpu-exporter"},
    {"summary": "A user's GPU processes hold memory without using the GPU.",
     "description": "Processes of user alice hold 38GiB of GPU memory without using it.",
     "processes": "- lab-ws-01 GPU 2 (NVIDIA RTX A6000): pid 30958 jupyter-kernel, user alice, "
                  "holds 38GiB, no GPU work seen, running for 3d 0h 0m 0s\n",
     "commands": "kill 30958  # on lab-ws-01\n",
     "escalation": "If this is still so 24h after this notice, the lab lead or operator is told.",
     # As the rule writes it with prices (annotations.test.yaml renders the same text).
     "cost": "The idle hold has cost 2.58 EUR so far (1h 1m 0s, at this site's prices).",
     "runbook_url": "https://example.org/runbook#gpuprocessidle"},
)
POD = _alert(
    {"alertname": "GpuAllocatedIdle", "audience": "owner", "severity": "warning",
     "namespace": "vision", "pod": "nb-0", "gpu": "1"},
    {"summary": "A pod holds an allocated GPU and does nothing with it.",
     "description": "Pod vision/nb-0 was given GPU 1.", "processes": "",
     "commands": "kubectl delete pod -n vision nb-0",
     "escalation": "If this is still so 24h after this notice, the lab lead or operator is told.",
     "runbook_url": "https://example.org/runbook#gpuallocatedidle"},
)
JOB = _alert(
    {"alertname": "GpuOwnerAlertUnresolved", "audience": "operator", "severity": "warning",
     "user": "bob", "owner_alert": "GpuProcessIdle"},
    {"summary": "An owner was told about their GPU use and has not acted.",
     "description": "GpuProcessIdle about user bob has been firing for more than 24h.",
     "processes": "- hpc-gpu-12 GPU 0 (NVIDIA H100): pid 71000 python3, user bob, Slurm job "
                  "4711, holds 30GiB\n",
     "commands": "scancel 4711\n",
     "runbook_url": "https://example.org/runbook#gpuowneralertunresolved"},
)
DOWN = _alert(
    {"alertname": "GpuDown", "audience": "operator", "severity": "critical", "gpu": "3",
     "instance": "gpu-node-12:9400", "uuid": "GPU-x"},
    {"summary": "A GPU stopped answering.", "description": "GPU 3 on gpu-node-12 is lost.",
     "runbook_url": "https://example.org/runbook#gpudown"},
)


def _render(data: dict[str, Any], template: str, tmp_path: Path, kind: str = "text") -> str:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(data))
    result = amtool("template", "render", f"--template.glob={SHIPPED}/*.tmpl",
                    f"--template.data={path}", f"--template.type={kind}",
                    f'--template.text={{{{ template "{template}" . }}}}')
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_owner_email_names_the_process_the_memory_and_the_command(tmp_path: Path) -> None:
    data = _data("gpu-owner", [IDLE], {"user": "alice"})
    subject = _render(data, "gpu_exporter.subject", tmp_path)
    assert subject == "[GPU] A user's GPU processes hold memory without using the GPU."
    body = _render(data, "gpu_exporter.email.text", tmp_path)
    assert body.startswith("Hello alice,")
    for fact in ("pid 30958 jupyter-kernel", "holds 38GiB", "running for 3d", "lab-ws-01 GPU 2",
                 "kill 30958", "What it costs: The idle hold has cost 2.58 EUR so far (1h 1m 0s",
                 "https://grafana.example.org/d/gpu-exporter-users/?var-user=alice",
                 "the lab lead or operator is told", "#gpuprocessidle"):
        assert fact in body, fact
    html = _render(data, "gpu_exporter.email.html", tmp_path, kind="html")
    assert "<pre" in html
    assert "user&#39;s GPU processes" in html  # escaped as HTML
    chat = _render(data, "gpu_exporter.chat.text", tmp_path)
    assert "*GpuProcessIdle* (warning), user alice" in chat
    assert "kill 30958" in chat


def test_a_team_notice_names_the_pod_and_the_kubectl_command(tmp_path: Path) -> None:
    data = _data("gpu-owner-team-vision", [POD], {"namespace": "vision"})
    body = _render(data, "gpu_exporter.email.text", tmp_path)
    assert body.startswith("Hello namespace vision,")
    assert "kubectl delete pod -n vision nb-0" in body
    assert "/d/gpu-exporter-workloads/?var-namespace=vision" in body


def test_the_lead_hears_who_did_not_act(tmp_path: Path) -> None:
    data = _data("gpu-lead", [JOB], {"user": "bob"})
    assert _render(data, "gpu_exporter.subject", tmp_path) == "[GPU] Not acted on: bob (1 notice)"
    body = _render(data, "gpu_exporter.email.text", tmp_path)
    assert "told bob about the following" in body
    assert "Slurm job 4711" in body
    assert "scancel 4711" in body


def test_the_operator_gets_the_terse_form_and_resolved_notices(tmp_path: Path) -> None:
    data = _data("gpu-operator", [DOWN], {"alertname": "GpuDown", "instance": "gpu-node-12:9400"})
    subject = _render(data, "gpu_exporter.subject", tmp_path)
    assert subject == "[GPU FIRING:1] GpuDown on gpu-node-12:9400"
    body = _render(data, "gpu_exporter.email.text", tmp_path)
    assert "[critical] GpuDown: A GPU stopped answering." in body
    assert "uuid=GPU-x" in body
    resolved = _data("gpu-operator", [{**DOWN, "status": "resolved"}],
                     {"alertname": "GpuDown"}, status="resolved")
    assert _render(resolved, "gpu_exporter.subject", tmp_path).startswith("[GPU RESOLVED]")
    assert "[resolved] GpuDown" in _render(resolved, "gpu_exporter.email.text", tmp_path)


#: (source, target, muted) alert label pairs for the inhibition rules, sent to a real
#: Alertmanager: the target is muted exactly when ``muted``.
_GPU = {"job": "gpu-exporter", "instance": "n1:9400", "gpu": "3", "uuid": "GPU-d"}
INHIBITION_CASES: list[tuple[str, dict[str, str], dict[str, str], bool]] = [
    ("a GPU down mutes that GPU's other alerts",
     {**_GPU, "alertname": "GpuDown", "severity": "critical"},
     {**_GPU, "alertname": "GpuMemoryHeldIdle", "user": "alice", "severity": "warning"}, True),
    ("... but not another GPU's",
     {**_GPU, "alertname": "GpuMissing", "severity": "critical"},
     {**_GPU, "gpu": "2", "uuid": "GPU-c", "alertname": "GpuTemperatureHigh",
      "severity": "warning"}, False),
    ("an exporter down mutes its target's alerts",
     {"job": "gpu-exporter", "instance": "n2:9400", "alertname": "GpuExporterDown",
      "severity": "warning"},
     {"job": "gpu-exporter", "instance": "n2:9400", "alertname": "GpuExporterDataStale",
      "severity": "warning"}, True),
    ("the critical temperature mutes the warning of the same GPU",
     {**_GPU, "instance": "n3:9400", "alertname": "GpuTemperatureCritical",
      "severity": "critical"},
     {**_GPU, "instance": "n3:9400", "alertname": "GpuTemperatureHigh", "severity": "warning"},
     True),
    ("critical mutes warning of the same alert and GPU",
     {**_GPU, "instance": "n4:9400", "alertname": "GpuXidStorm", "severity": "critical"},
     {**_GPU, "instance": "n4:9400", "alertname": "GpuXidStorm", "severity": "warning"}, True),
    ("a user's idle processes mute their milder idle alerts",
     {"job": "gpu-exporter", "user": "erin", "alertname": "GpuProcessIdle",
      "severity": "warning"},
     {"job": "gpu-exporter", "user": "erin", "alertname": "GpuUserMemoryIdle",
      "severity": "info"}, True),
    ("... and their escalations alike",
     {"job": "gpu-exporter", "user": "erin", "alertname": escalation.ALERT,
      "owner_alert": "GpuProcessIdle"},
     {"job": "gpu-exporter", "user": "erin", "alertname": escalation.ALERT,
      "owner_alert": "GpuMemoryHeldIdle", "instance": "n1:9400"}, True),
    ("... not another user's",
     {"job": "gpu-exporter", "user": "frank", "alertname": "GpuProcessIdle",
      "severity": "warning"},
     {"job": "gpu-exporter", "user": "gina", "alertname": "GpuUserMemoryIdle",
      "severity": "info"}, False),
]


@pytest.mark.slow
def test_inhibitions_mute_what_they_should_in_a_real_alertmanager(tmp_path: Path) -> None:
    quiet = {kind: {"group_wait": "1h", "group_interval": "1h", "repeat_interval": "24h"}
             for kind in routing.TIMINGS}
    with sinks() as sink:
        config = write_config(tmp_path / "am", lab_contacts(sink, quiet))
        with alertmanager_running(config, tmp_path, time.monotonic() + 30) as manager:
            # Distinct instances and users keep the cases apart (checked by the silent ones).
            post_alerts(manager, [{"labels": {**labels, "role": role}}
                                  for _, source, target, _ in INHIBITION_CASES
                                  for labels, role in ((source, "source"), (target, "target"))])
            held = manager.alerts()
            assert len(held) == 2 * len(INHIBITION_CASES)
        assert sink.recipients() == set()  # nothing was due yet
    for name, _, target, muted in INHIBITION_CASES:
        found = [a for a in held if a["labels"].get("role") == "target"
                 and all(a["labels"].get(k) == v for k, v in target.items())]
        assert len(found) == 1, name
        assert bool(found[0]["status"]["inhibitedBy"]) is muted, name


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({}, "missing operator"),
        ({"operator": "ops@example.org"}, "e-mail receivers need smtp"),
        ({"operator": {"chat": {"webhook_url": "ftp://x"}}}, "must be an http(s) URL"),
        ({"operator": {"chat": {"webhook_url": "http://x", "webhook_url_file": "/f"}}},
         "exactly one of webhook_url and webhook_url_file"),
        ({"operator": "not-an-address"}, "is not valid here"),
        ({"operator": "o@example.org", "smtp": {"smarthost": "mail", "from": "g@example.org"}},
         "is not host:port"),
        ({"operator": "o@example.org", "smtp": {"smarthost": "m:25", "from": "g@example.org"},
          "teams": {"t": {"namespaces": ["a"]}}}, "needs an email or chat"),
        ({"operator": "o@example.org", "smtp": {"smarthost": "m:25", "from": "g@example.org"},
          "timings": {"owner": {"group_wait": "soon"}}}, "timings.owner.group_wait"),
        ({"operator": "o@example.org", "emial_domain": "example.org"}, "unknown key(s) emial"),
    ],
)
def test_a_wrong_contacts_file_gets_a_clear_error(document: dict[str, Any], message: str) -> None:
    with pytest.raises(contacts.ContactsError, match=message.replace("(", r"\(").replace(
            ")", r"\)")):
        contacts.parse(document)


def test_the_command_line_reports_a_bad_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "contacts.yaml"
    bad.write_text("operator: [unclosed\n")
    assert alertmanager.main([str(bad), "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dashboards.alertmanager: error: ")
    assert "not valid YAML" in err
    assert not (tmp_path / "out").exists()


def test_templates_can_live_where_the_operator_mounts_them(tmp_path: Path) -> None:
    out = tmp_path / "am"
    assert alertmanager.main([str(EXAMPLE), "--output-dir", str(out),
                              "--templates-dir", "/etc/alertmanager/config/"]) == 0
    config = yaml.safe_load((out / alertmanager.CONFIG_FILE).read_text())
    assert config["templates"] == ["/etc/alertmanager/config/gpu-exporter.tmpl",
                                   "/etc/alertmanager/config/gpu-exporter-site.tmpl"]
    assert alertmanager.main([str(EXAMPLE), "--check-dir", str(out),
                              "--templates-dir", "/etc/alertmanager/config"]) == 0


def test_the_generator_needs_pyyaml_only() -> None:
    """A site runs it from a checkout with the system's Python and PyYAML."""
    code = ("import sys, dashboards.alertmanager; print(sorted({m.split('.')[0] for m in "
            "sys.modules} - set(sys.stdlib_module_names)))")
    result = subprocess.run([sys.executable, "-S", "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, check=False,
                            env={"PYTHONPATH": f"{ROOT}:{Path(yaml.__file__).parents[1]}"})
    assert result.returncode == 0, result.stderr
    loaded = {m for m in ast.literal_eval(result.stdout)
              if not m.startswith(("_", "cython"))}  # PyYAML's C extension brings Cython's
    assert loaded <= {"dashboards", "exporter", "yaml"}
