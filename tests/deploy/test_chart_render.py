"""The Helm chart renders, lints and produces valid objects for a matrix of values."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import helm_python
import jsonschema
import kubernetes_validate
import pytest
import yaml

from exporter.catalogue.metrics import BY_NAME
from exporter.config import FLAGS, build_parser
from tests.deploy import operator_crds
from tests.deploy.helm_render import CHART_DIR, KUBE_VERSIONS, Rendered, chart, render

OPERATOR_KINDS = frozenset(operator_crds.SCHEMAS)
#: What values.yaml says to set once podResources (the one root-only reader) is off.
NOBODY = {"securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534}}

#: id -> (values, cluster serves monitoring.coreos.com/v1)
CASES: dict[str, tuple[dict[str, Any], bool]] = {
    "defaults": ({}, True),
    "defaults-without-operator": ({}, False),
    "podmonitor-kube-prometheus-stack": (
        {"monitor": {"kind": "PodMonitor", "additionalLabels": {"release": "kps"}},
         "prometheusRule": {"additionalLabels": {"release": "kps"}}},
        True,
    ),
    "monitor-none": ({"monitor": {"kind": "none"}}, True),
    "forced-without-operator": (
        {"monitor": {"force": True}, "prometheusRule": {"force": True}}, False,
    ),
    "rules-and-dashboards-off": (
        {"prometheusRule": {"enabled": False}, "dashboards": {"enabled": False}}, True,
    ),
    "hostpid-and-passwd-off": ({"hostPID": False, "hostPasswd": {"enabled": False}}, True),
    "kubernetes-attribution": ({"kubernetes": {"enabled": True}}, True),
    "torch-allocator": ({"torch": {"enabled": True}}, True),
    "kubernetes-off": ({"kubernetes": {"enabled": False}, **NOBODY}, True),
    "pod-resources-off": ({"kubernetes": {"podResources": {"enabled": False}}, **NOBODY}, True),
    "pod-resources-custom": (
        {"kubernetes": {"podResources": {"directory": "/data/kubelet/pod-resources",
                                         "interval": "10s", "maxBytes": 33554432}}},
        True,
    ),
    "custom-scheduling": (
        {
            # Helm merges maps with the defaults: null removes the default key.
            "nodeSelector": {"nvidia.com/gpu.present": None,
                             "node.example.com/accelerator": "h200"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu",
                             "effect": "NoExecute"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
            "runtimeClassName": "nvidia",
            "priorityClassName": "system-node-critical",
            "updateStrategy": {"type": "OnDelete"},
        },
        True,
    ),
    "everything-else": (
        {
            "image": {"repository": "registry.example.com/gpu-exporter", "tag": "dev",
                      "digest": "sha256:" + "a" * 64, "pullPolicy": "Always"},
            "imagePullSecrets": [{"name": "regcred"}],
            "fullnameOverride": "gpux",
            "port": 9500,
            "telemetryPath": "/gpu-metrics",
            "log": {"level": "debug", "format": "logfmt"},
            "extraArgs": ["--collector.energy", "--no-process.pid-label"],
            "extraEnv": [{"name": "GPU_EXPORTER_COLLECTOR_TIMEOUT", "value": "3s"}],
            "extraVolumes": [{"name": "scenario", "configMap": {"name": "gpu-scenario"}}],
            "extraVolumeMounts": [{"name": "scenario", "mountPath": "/etc/scenario"}],
            "securityContext": {"runAsNonRoot": False, "runAsUser": 0,
                                "readOnlyRootFilesystem": True,
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]}},
            "podAnnotations": {"example.com/team": "ml-platform"},
            "podLabels": {"team": "ml-platform"},
            "serviceAccount": {"create": False, "name": "existing"},
            "service": {"headless": True, "labels": {"extra": "yes"},
                        "annotations": {"example.com/a": "b"}},
            "monitor": {"interval": "30s", "scrapeTimeout": "25s", "honorLabels": False,
                        "relabelings": [{"targetLabel": "cluster", "replacement": "eu-1"}],
                        "metricRelabelings": [{"sourceLabels": ["__name__"],
                                               "regex": "gpu_fan_.*", "action": "drop"}]},
            "scrapeAnnotations": {"enabled": False},
            "dashboards": {"label": "grafana_dashboard", "labelValue": "gpu",
                           "namespace": "grafana", "folder": "GPU",
                           "annotations": {"example.com/x": "y"}},
            "networkPolicy": {"enabled": True, "from": [{"namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]},
        },
        True,
    ),
    "alertmanager-config": (
        {"alertmanagerConfig": {
            "enabled": True, "additionalLabels": {"release": "kps"}, "lead": "lead@example.org",
            "smtp": {"smarthost": "mail.example.org:587", "from": "gpu@example.org",
                     "requireTLS": True, "authUsername": "gpu",
                     "authPassword": {"name": "smtp", "key": "password"}},
            "templates": {"namespace": "monitoring", "grafanaURL": "https://grafana.example.org"},
            "teams": [
                {"namespace": "vision", "email": "vision@example.org",
                 "chat": {"webhookURL": {"name": "vision-chat", "key": "url"},
                          "channel": "#vision"}},
                {"namespace": "nlp", "chat": {"webhookURL": {"name": "nlp-chat", "key": "url"}},
                 "lead": "nlp-lead@example.org"},
            ]}},
        True,
    ),
    "locked-down-servicemonitor": (
        {
            "webConfig": {"secretName": "gpu-exporter-web", "tlsSecretName": "gpu-exporter-tls",
                          "tls": True},
            "monitor": {
                "tlsConfig": {"ca": {"secret": {"name": "gpu-exporter-tls", "key": "ca.crt"}},
                              "serverName": "gpu-exporter"},
                "basicAuth": {"username": {"name": "scrape", "key": "username"},
                              "password": {"name": "scrape", "key": "password"}},
            },
            "networkPolicy": {"enabled": True},
        },
        True,
    ),
    "mtls-podmonitor": (
        {
            "webConfig": {"secretName": "gpu-exporter-web", "tls": True},
            "monitor": {"kind": "PodMonitor", "tlsConfig": {
                "ca": {"secret": {"name": "web", "key": "ca.crt"}},
                "cert": {"secret": {"name": "prom-client", "key": "tls.crt"}},
                "keySecret": {"name": "prom-client", "key": "tls.key"},
                "serverName": "gpu-exporter"}},
        },
        True,
    ),
}


def _render(case: str) -> Rendered:
    values, operator = CASES[case]
    return render(values, operator=operator)


def _daemonset(rendered: Rendered) -> dict[str, Any]:
    return rendered.one("DaemonSet")


def _container(rendered: Rendered) -> dict[str, Any]:
    containers = _daemonset(rendered)["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    result: dict[str, Any] = containers[0]
    return result


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_object_is_valid(case: str) -> None:
    rendered = _render(case)
    assert rendered.of_kind("DaemonSet"), "no DaemonSet rendered"
    for obj in rendered.objects:
        if obj["kind"] in OPERATOR_KINDS:
            operator_crds.validate(obj)
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} invalid for "
                            f"Kubernetes {version}: {exc.message} at {list(exc.path)}")


@pytest.mark.parametrize("case", sorted(CASES))
def test_lint_has_no_errors_or_warnings(case: str) -> None:
    values, _ = CASES[case]
    report = helm_python.lint(CHART_DIR, values, strict=True)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert problems == [], problems
    assert report["errors"] == []


@pytest.mark.parametrize("case", sorted(CASES))
def test_object_names_are_unique_and_namespaced(case: str) -> None:
    rendered = _render(case)
    keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])
            for o in rendered.objects]
    assert len(keys) == len(set(keys)), keys
    for obj in rendered.objects:
        assert obj["metadata"].get("namespace"), f"{obj['kind']} has no namespace"


@pytest.mark.parametrize("case", sorted(CASES))
def test_exporter_accepts_the_rendered_arguments(case: str) -> None:
    """Every flag the chart passes exists in exporter/config.py and its value parses."""
    args = _container(_render(case))["args"]
    namespace = build_parser().parse_args(args)  # SystemExit(2) on an unknown flag
    by_dest = {f.dest: f for f in FLAGS}
    for dest, raw in vars(namespace).items():
        flag = by_dest[dest]
        if raw is None or flag.parse is None:
            continue
        flag.parse(raw)  # ValueError names the problem


def test_defaults_run_on_every_gpu_node_without_taking_a_gpu() -> None:
    rendered = _render("defaults")
    pod = _daemonset(rendered)["spec"]["template"]["spec"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["hostPID"] is True
    assert "runtimeClassName" not in pod
    assert pod["automountServiceAccountToken"] is False
    container = _container(rendered)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    hostname = next(e for e in container["env"] if e["name"] == "GPU_EXPORTER_HOSTNAME")
    assert hostname["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    for section in ("requests", "limits"):
        assert "nvidia.com/gpu" not in container["resources"].get(section, {})
    assert container["resources"]["limits"]["memory"]


def test_defaults_are_locked_down() -> None:
    rendered = _render("defaults")
    security = _container(rendered)["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    # uid 0 only for the kubelet's root-only PodResources socket; no capability is added back.
    assert (security["runAsUser"], security["runAsGroup"], security["runAsNonRoot"]) == (
        0, 0, False)
    pod = _daemonset(rendered)["spec"]["template"]["spec"]
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert rendered.of_kind("Role") == rendered.of_kind("ClusterRole") == []
    assert rendered.of_kind("RoleBinding") == rendered.of_kind("ClusterRoleBinding") == []
    assert rendered.one("ServiceAccount")["automountServiceAccountToken"] is False
    for case in ("pod-resources-off", "kubernetes-off"):
        security = _container(_render(case))["securityContext"]
        assert security["runAsNonRoot"] is True
        assert security["runAsUser"] == 65534


def test_rendered_security_context_is_what_values_say() -> None:
    """values.yaml's securityContext is what the default deploys, key for key, and values.yaml
    says why its uid is 0 (the PodResources socket, on by default, is root-only)."""
    text = (CHART_DIR / "values.yaml").read_text(encoding="utf-8")
    values = yaml.safe_load(text)
    assert values["kubernetes"]["podResources"]["enabled"] is True
    assert _container(_render("defaults"))["securityContext"] == values["securityContext"]
    assert values["securityContext"]["runAsUser"] == 0
    comment = text[:text.index("\nsecurityContext:")].rsplit("\n\n", 1)[-1]
    assert "PodResources socket, which only root may open" in comment
    # Whatever is set is rendered as set, never overridden by another value.
    for override in ({"runAsUser": 65534, "runAsGroup": 65534, "runAsNonRoot": True},
                     {"runAsUser": 1000, "runAsGroup": 1000}):
        security = _container(render({"securityContext": override}))["securityContext"]
        assert security == {**values["securityContext"], **override}


def test_notes_warn_when_uid_and_pod_resources_disagree() -> None:
    assert "WARNING: kubernetes.podResources" not in _render("defaults").notes
    assert "Note: the exporter runs as uid 0" not in _render("pod-resources-off").notes
    nobody_with_pod_resources = render(NOBODY).notes
    assert "WARNING: kubernetes.podResources is on but the exporter does not run as uid 0" in (
        " ".join(nobody_with_pod_resources.split()))
    root_without = render({"kubernetes": {"podResources": {"enabled": False}}}).notes
    assert "Note: the exporter runs as uid 0" in root_without
    assert "securityContext.runAsUser=65534" in root_without


def test_host_passwd_is_mounted_read_only_and_passed() -> None:
    rendered = _render("defaults")
    container = _container(rendered)
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/host/etc/passwd")
    assert mount["readOnly"] is True
    volume = next(v for v in _daemonset(rendered)["spec"]["template"]["spec"]["volumes"]
                  if v["name"] == mount["name"])
    assert volume["hostPath"] == {"path": "/etc/passwd", "type": "File"}
    assert "--passwd-file=/host/etc/passwd" in container["args"]

    off = _render("hostpid-and-passwd-off")
    container = _container(off)
    assert not any(a.startswith("--passwd-file") for a in container["args"])
    assert all(m["mountPath"] != "/host/etc/passwd" for m in container["volumeMounts"])
    assert _daemonset(off)["spec"]["template"]["spec"]["hostPID"] is False
    assert "hostPID is off" in off.notes


def test_probes_use_health_endpoints_with_timeouts() -> None:
    container = _container(_render("defaults"))
    assert container["ports"] == [{"name": "metrics", "containerPort": 9477, "protocol": "TCP"}]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "metrics"}
        assert container[probe]["timeoutSeconds"] >= 3


def _host_mounts(rendered: Any) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """mountPath -> (volumeMount, hostPath) of the exporter container."""
    volumes = {v["name"]: v for v in _daemonset(rendered)["spec"]["template"]["spec"]["volumes"]}
    return {m["mountPath"]: (m, volumes[m["name"]].get("hostPath", {}))
            for m in _container(rendered)["volumeMounts"]}


def test_kubernetes_attribution_is_on_by_default_with_read_only_mounts() -> None:
    rendered = _render("defaults")
    args = _container(rendered)["args"]
    assert "--kubernetes" in args
    assert "--kubernetes.pod-logs-dir=/var/log/pods" in args
    assert "--kubernetes.container-logs-dir=/var/log/containers" in args
    assert ("--kubernetes.pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock"
            in args)
    assert "--kubernetes.pod-resources-interval=5s" in args
    assert "--kubernetes.pod-resources-max-bytes=16777216" in args
    mounts = _host_mounts(rendered)
    for path in ("/var/log/pods", "/var/log/containers", "/var/lib/kubelet/pod-resources"):
        mount, host = mounts[path]
        assert mount["readOnly"] is True
        assert host == {"path": path, "type": "Directory"}  # the directory, not the socket

    custom = _render("pod-resources-custom")
    args = _container(custom)["args"]
    assert "--kubernetes.pod-resources-socket=/data/kubelet/pod-resources/kubelet.sock" in args
    assert "--kubernetes.pod-resources-interval=10s" in args
    assert "--kubernetes.pod-resources-max-bytes=33554432" in args
    assert _host_mounts(custom)["/data/kubelet/pod-resources"][0]["readOnly"] is True

    off = _render("pod-resources-off")
    assert "--kubernetes.pod-resources-socket=" in _container(off)["args"]
    assert "/var/lib/kubelet/pod-resources" not in _host_mounts(off)
    assert "--kubernetes" in _container(off)["args"]

    none = _render("kubernetes-off")
    assert not any(a.startswith("--kubernetes") for a in _container(none)["args"])
    assert set(_host_mounts(none)) & {"/var/log/pods", "/var/lib/kubelet/pod-resources"} == set()


def test_torch_allocator_mounts_the_shared_directory_and_prepares_it() -> None:
    rendered = _render("torch-allocator")
    container = _container(rendered)
    assert "--collector.torch" in container["args"]
    assert "--torch.dir=/run/gpu-exporter/torch" in container["args"]
    pod = _daemonset(rendered)["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mount = next(m for m in container["volumeMounts"]
                 if m["mountPath"] == "/run/gpu-exporter/torch")
    assert not mount.get("readOnly")  # the exporter removes files of exited processes
    assert volumes[mount["name"]]["hostPath"] == {"path": "/run/gpu-exporter/torch",
                                                  "type": "DirectoryOrCreate"}
    # The init container makes it 1777 and the exporter's: root, but only CAP_CHOWN.
    (init,) = pod["initContainers"]
    assert init["securityContext"]["runAsUser"] == 0
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    # Owned by whoever the exporter runs as (uid 0 included: without CAP_FOWNER root may only
    # delete publishers' files in a sticky directory it owns).
    assert init["args"] == ["/run/gpu-exporter/torch", "0", "0"]
    (as_nobody,) = _daemonset(render({"torch": {"enabled": True}, **NOBODY}))["spec"][
        "template"]["spec"]["initContainers"]
    assert as_nobody["args"] == ["/run/gpu-exporter/torch", "65534", "65534"]
    assert init["volumeMounts"] == [{"name": mount["name"],
                                     "mountPath": "/run/gpu-exporter/torch"}]
    defaults = _daemonset(_render("defaults"))["spec"]["template"]["spec"]
    assert "initContainers" not in defaults
    assert "--collector.torch" not in _container(_render("defaults"))["args"]


def test_torch_init_container_command_prepares_a_directory(tmp_path: Path) -> None:
    """The init container's Python, run here on a directory of ours (no chown to others)."""
    (init,) = _daemonset(_render("torch-allocator"))["spec"]["template"]["spec"]["initContainers"]
    target = tmp_path / "torch"
    target.mkdir(mode=0o755)
    uid, gid = str(os.getuid()), str(os.getgid())
    subprocess.run([sys.executable, *init["command"][1:], str(target), uid, gid], check=True)
    assert stat.S_IMODE(target.stat().st_mode) == 0o1777


def test_custom_scheduling_replaces_the_defaults() -> None:
    rendered = _render("custom-scheduling")
    spec = _daemonset(rendered)["spec"]
    pod = spec["template"]["spec"]
    values = CASES["custom-scheduling"][0]
    assert pod["nodeSelector"] == {"node.example.com/accelerator": "h200"}
    assert pod["tolerations"] == values["tolerations"]
    assert pod["affinity"] == values["affinity"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["priorityClassName"] == "system-node-critical"
    assert spec["updateStrategy"] == {"type": "OnDelete"}  # no rollingUpdate left over
    assert _daemonset(_render("defaults"))["spec"]["updateStrategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}


def test_service_monitor_selects_the_service_and_labels_the_node() -> None:
    rendered = _render("defaults")
    service = rendered.one("Service")
    monitor = rendered.one("ServiceMonitor")
    assert service["spec"]["ports"][0]["name"] == monitor["spec"]["endpoints"][0]["port"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= (
        _daemonset(rendered)["spec"]["template"]["metadata"]["labels"].items())
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["interval"] == "15s"
    assert endpoint["scrapeTimeout"] == "10s"
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node",
            "action": "replace"} in endpoint["relabelings"]
    # The exporter pod's own identity moves aside, so namespace/pod/container on per-process
    # series only ever come from the exporter (the GPU workload's, or empty for host processes).
    assert {"sourceLabels": ["pod"], "targetLabel": "exporter_pod",
            "action": "replace"} in endpoint["relabelings"]
    assert endpoint["relabelings"][3] == {"action": "labeldrop",
                                          "regex": "(namespace|pod|container)"}


def test_pod_monitor_carries_release_label_for_kube_prometheus_stack() -> None:
    rendered = _render("podmonitor-kube-prometheus-stack")
    assert rendered.of_kind("ServiceMonitor") == []
    monitor = rendered.one("PodMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    assert endpoint["port"] == "metrics"
    assert endpoint["relabelings"][0]["targetLabel"] == "node"
    pod_labels = _daemonset(rendered)["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_operator_objects_only_where_the_api_exists_or_forced() -> None:
    assert OPERATOR_KINDS.isdisjoint(_render("defaults-without-operator").kinds())
    none = _render("monitor-none").kinds()
    assert "ServiceMonitor" not in none
    assert "PodMonitor" not in none
    assert "PrometheusRule" in none  # the rules do not depend on the monitor
    forced = _render("forced-without-operator").kinds()
    assert "ServiceMonitor" in forced
    assert "ServiceMonitor" in _render("defaults").kinds()
    assert "PrometheusRule" not in _render("rules-and-dashboards-off").kinds()
    assert "ConfigMap" not in _render("rules-and-dashboards-off").kinds()


def test_service_monitor_without_service_fails_clearly() -> None:
    with pytest.raises(helm_python.HelmRenderError, match=r"needs service\.enabled=true"):
        render({"service": {"enabled": False}})
    assert "Service" not in render(
        {"service": {"enabled": False}, "monitor": {"kind": "PodMonitor"}}).kinds()


def test_everything_else_is_wired_through() -> None:
    rendered = _render("everything-else")
    values = CASES["everything-else"][0]
    ds = _daemonset(rendered)
    pod = ds["spec"]["template"]["spec"]
    container = _container(rendered)
    assert ds["metadata"]["name"] == "gpux"
    assert container["image"] == "registry.example.com/gpu-exporter:dev@sha256:" + "a" * 64
    assert container["imagePullPolicy"] == "Always"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["serviceAccountName"] == "existing"
    assert rendered.of_kind("ServiceAccount") == []
    assert container["args"][-2:] == values["extraArgs"]
    assert "--web.listen-address=:9500" in container["args"]
    assert "--web.telemetry-path=/gpu-metrics" in container["args"]
    assert {"name": "GPU_EXPORTER_COLLECTOR_TIMEOUT", "value": "3s"} in container["env"]
    assert values["extraVolumes"][0] in pod["volumes"]
    assert values["extraVolumeMounts"][0] in container["volumeMounts"]
    assert container["securityContext"]["runAsUser"] == 0
    meta = ds["spec"]["template"]["metadata"]
    assert meta["annotations"] == {"example.com/team": "ml-platform"}  # no prometheus.io/*
    assert meta["labels"]["team"] == "ml-platform"
    service = rendered.one("Service")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["ports"][0]["port"] == 9500
    endpoint = rendered.one("ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["path"] == "/gpu-metrics"
    assert endpoint["honorLabels"] is False
    assert endpoint["relabelings"][-1] == values["monitor"]["relabelings"][0]
    assert endpoint["metricRelabelings"] == values["monitor"]["metricRelabelings"]
    policy = rendered.one("NetworkPolicy")
    assert policy["spec"]["ingress"][0]["from"] == values["networkPolicy"]["from"]
    assert policy["spec"]["ingress"][0]["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert policy["spec"]["egress"] == []


def test_scrape_annotations_for_clusters_without_the_operator() -> None:
    meta = _daemonset(_render("defaults-without-operator"))["spec"]["template"]["metadata"]
    assert meta["annotations"] == {"prometheus.io/scrape": "true", "prometheus.io/port": "9477",
                                   "prometheus.io/path": "/metrics",
                                   "prometheus.io/scheme": "http"}


def test_notes_say_how_to_check_and_name_real_metrics() -> None:
    rendered = _render("defaults")
    assert "kubectl -n monitoring port-forward ds/gpu-gpu-exporter 9477:9477" in rendered.notes
    assert "curl -s http://127.0.0.1:9477/metrics" in rendered.notes
    names = set(re.findall(r"\bgpu_[a-z_]+\b", rendered.notes)) - {"gpu_"}
    assert names, "NOTES name no metric"
    assert names <= {*BY_NAME, "gpu_exporter"}, names - set(BY_NAME)
    assert "did not" not in rendered.notes
    missing = _render("defaults-without-operator").notes
    assert "does not serve monitoring.coreos.com/v1" in missing


def test_chart_app_version_is_the_exporter_version() -> None:
    from exporter import __version__  # noqa: PLC0415

    assert chart().metadata["appVersion"] == __version__


def test_operator_schema_rejects_a_broken_monitor() -> None:
    """The trimmed CRD schemas catch what they are meant to catch."""
    monitor = _render("defaults").one("ServiceMonitor")
    del monitor["spec"]["endpoints"][0]["port"]
    with pytest.raises(jsonschema.ValidationError, match="'port' is a required property"):
        operator_crds.validate(monitor)


def test_longest_release_name_still_renders_valid_unique_objects() -> None:
    name = "r" * 53  # Helm's maximum release name
    rendered = render({}, name=name)
    keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])
            for o in rendered.objects]
    assert len(keys) == len(set(keys)), keys
    assert len(rendered.of_kind("ConfigMap")) > 1
    for obj in rendered.objects:
        if obj["kind"] not in OPERATOR_KINDS:
            kubernetes_validate.validate(obj, KUBE_VERSIONS[-1], strict=True)
        for value in obj["metadata"]["labels"].values():
            assert len(value) <= 63


def test_helm_test_pod_asks_the_service() -> None:
    rendered = _render("defaults")
    (pod,) = [o for o in rendered.of_kind("Pod")
              if o["metadata"]["annotations"]["helm.sh/hook"] == "test"]
    script = pod["spec"]["containers"][0]["command"][-1]
    service = rendered.one("Service")["metadata"]["name"]
    assert f"http://{service}.monitoring.svc:9477/readyz" in script
    compile(script, "helm-test", "exec")  # the embedded Python is valid
    assert "Pod" not in render({"helmTest": {"enabled": False}}).kinds()


def test_web_config_from_secrets_and_monitor_speaks_https() -> None:
    rendered = _render("locked-down-servicemonitor")
    container = _container(rendered)
    assert "--web.config.file=/etc/gpu-exporter/web/web-config.yml" in container["args"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["web-config"]["mountPath"] == "/etc/gpu-exporter/web"
    assert mounts["web-tls"]["mountPath"] == "/etc/gpu-exporter/tls"
    assert all(mounts[n]["readOnly"] for n in ("web-config", "web-tls"))
    volumes = {v["name"]: v for v in _daemonset(rendered)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["web-config"]["secret"]["secretName"] == "gpu-exporter-web"
    assert volumes["web-tls"]["secret"]["secretName"] == "gpu-exporter-tls"
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS"
    annotations = _daemonset(rendered)["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scheme"] == "https"
    (endpoint,) = rendered.one("ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["serverName"] == "gpu-exporter"
    assert endpoint["basicAuth"]["password"] == {"name": "scrape", "key": "password"}
    (endpoint,) = _render("mtls-podmonitor").one("PodMonitor")["spec"]["podMetricsEndpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["keySecret"] == {"name": "prom-client", "key": "tls.key"}
    helm_test = [p for p in rendered.of_kind("Pod") if "test-readyz" in p["metadata"]["name"]]
    assert "https://" in helm_test[0]["spec"]["containers"][0]["command"][-1]


def test_default_monitor_is_plain_http_without_web_config() -> None:
    rendered = _render("defaults")
    assert not any(a.startswith("--web.config.file") for a in _container(rendered)["args"])
    (endpoint,) = rendered.one("ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "http"
    assert "tlsConfig" not in endpoint
    assert "basicAuth" not in endpoint


def test_default_image_says_it_is_not_published() -> None:
    """Nobody publishes the default repository yet: values.yaml and the notes say so, and a
    repository of one's own silences the warning."""
    values = (CHART_DIR / "values.yaml").read_text(encoding="utf-8")
    assert "No official image is published yet" in values[:values.index("\nimage:")]
    default = render().notes
    assert "WARNING: no official image is published yet" in default
    assert f"ghcr.io/gpu-exporter/gpu-exporter:{chart().version}" in default
    own = render({"image": {"repository": "registry.example.com/gpu-exporter"}}).notes
    assert "no official image" not in own
