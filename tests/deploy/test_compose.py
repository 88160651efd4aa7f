"""docker/compose.yaml: parses, references files that exist, and sets what the stack needs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.config import FLAGS, build_parser
from exporter.sources.simulated.scenario import list_presets
from tests.deploy.stack import (
    DOCKER,
    REPO,
    bind_mounts,
    compose,
    dashboard_files,
    host_path,
    service,
    with_defaults,
)

EXPORTERS = ("exporter", "exporter-demo")
#: Host paths outside the repository that the stack may bind-mount.
HOST_PATHS = {"/etc/passwd", "/run/gpu-exporter/torch"}


def _args(name: str) -> list[str]:
    return [with_defaults(a) for a in service(name)["command"]]


def test_services_and_profiles() -> None:
    services = compose()["services"]
    assert set(services) == {*EXPORTERS, "prometheus", "grafana"}
    assert service("exporter")["profiles"] == ["gpu"]
    assert service("exporter-demo")["profiles"] == ["demo"]
    # Prometheus and Grafana start whichever profile is chosen.
    assert "profiles" not in service("prometheus")
    assert "profiles" not in service("grafana")


def test_every_repository_path_exists() -> None:
    checked = 0
    for name, svc in compose()["services"].items():
        build = svc.get("build")
        if build:
            context = host_path(build["context"])
            assert context == REPO, f"{name}: build context {context} is not the repository"
            assert (context / build["dockerfile"]).is_file()
            checked += 1
        for mount in bind_mounts(name):
            source = mount["source"]
            if source.startswith("/"):
                assert source in HOST_PATHS, f"{name}: unexpected host path {source}"
                continue
            path = host_path(source)
            assert path.exists(), f"{name}: bind source {source} ({path}) does not exist"
            assert REPO in path.parents, f"{name}: {source} leaves the repository"
            checked += 1
    assert checked >= 6


def test_gpu_exporter_sees_host_processes_users_and_gpus() -> None:
    svc = service("exporter")
    assert svc["pid"] == "host"
    passwd = next(m for m in bind_mounts("exporter") if m["source"] == "/etc/passwd")
    assert passwd["target"] == "/host/etc/passwd"
    assert passwd["read_only"] is True
    assert "--passwd-file=/host/etc/passwd" in _args("exporter")
    devices = svc["deploy"]["resources"]["reservations"]["devices"]
    assert len(devices) == 1
    assert devices[0]["driver"] == "nvidia"
    assert devices[0]["count"] == "all"
    assert set(devices[0]["capabilities"]) & {"utility", "gpu"}
    assert svc["read_only"] is True
    assert svc["cap_drop"] == ["ALL"]


def test_both_exporters_collect_torch_allocator_figures() -> None:
    for name in EXPORTERS:
        assert "--collector.torch" in _args(name)
    shared = next(m for m in bind_mounts("exporter") if m["target"] == "/run/gpu-exporter/torch")
    assert shared["source"] == "/run/gpu-exporter/torch"  # the publishers' default directory
    assert not shared.get("read_only")  # files of exited processes are removed
    config = build_parser().parse_args(_args("exporter"))
    assert config.torch_dir is None  # the flag's default is that same directory


def test_demo_exporter_needs_no_gpu() -> None:
    svc = service("exporter-demo")
    assert "deploy" not in svc
    assert "pid" not in svc
    args = _args("exporter-demo")
    assert "--source=simulated" in args
    scenario = next(a.split("=", 1)[1] for a in args if a.startswith("--scenario="))
    assert scenario in list_presets()


@pytest.mark.parametrize("name", EXPORTERS)
def test_exporter_accepts_the_compose_arguments(name: str) -> None:
    namespace = build_parser().parse_args(_args(name))  # SystemExit(2) on an unknown flag
    by_dest = {f.dest: f for f in FLAGS}
    for dest, raw in vars(namespace).items():
        parse = by_dest[dest].parse
        if raw is not None and parse is not None:
            parse(raw)  # ValueError names the problem
    for variable in service(name).get("environment", {}):
        assert variable in {f.env for f in FLAGS}, f"{name}: {variable} is no exporter flag"


def test_every_port_is_published_on_loopback_by_default() -> None:
    for name, svc in compose()["services"].items():
        for port in svc.get("ports", []):
            assert with_defaults(port).startswith("127.0.0.1:"), f"{name}: {port}"


def test_both_exporters_answer_to_the_scraped_name() -> None:
    prometheus = (DOCKER / "prometheus" / "prometheus.yml").read_text(encoding="utf-8")
    targets = re.findall(r'targets: \["([^"]+)"\]', prometheus)
    host, port = targets[0].split(":")
    for name in EXPORTERS:
        assert host in service(name)["networks"]["default"]["aliases"]
        # Published on loopback unless PUBLISH_ADDRESS says otherwise (docs/security.md).
        assert [with_defaults(p) for p in service(name)["ports"]] == [
            f"127.0.0.1:{port}:{port}"]
    dockerfile = (DOCKER / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(rf"^EXPOSE {port}$", dockerfile, re.MULTILINE)


def test_prometheus_loads_the_repository_rules() -> None:
    command = service("prometheus")["command"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in command
    targets = {m["target"]: m for m in bind_mounts("prometheus")}
    assert host_path(targets["/etc/prometheus/prometheus.yml"]["source"]) == (
        DOCKER / "prometheus" / "prometheus.yml")
    assert host_path(targets["/etc/prometheus/rules"]["source"]) == REPO / "dashboards" / "rules"
    assert all(m["read_only"] for m in targets.values())


def test_grafana_gets_provisioning_and_the_repository_dashboards() -> None:
    targets = {m["target"]: m for m in bind_mounts("grafana")}
    assert host_path(targets["/etc/grafana/provisioning"]["source"]) == (
        DOCKER / "grafana" / "provisioning")
    dashboards_target = next(t for t, m in targets.items()
                             if host_path(m["source"]) == REPO / "dashboards" / "grafana")
    home = with_defaults(service("grafana")["environment"]
                         ["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert home.startswith(dashboards_target + "/")
    names = [p.name for p in dashboard_files()]
    assert names, "dashboards/grafana/ holds no dashboard yet"
    assert Path(home).name in names


def test_images_are_pinned() -> None:
    for name, svc in compose()["services"].items():
        image = svc["image"]
        if "build" in svc:
            continue
        assert re.fullmatch(r"[\w./-]+:v?\d+\.\d+\.\d+", image), f"{name}: {image} not pinned"
