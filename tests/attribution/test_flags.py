"""Attribution flags: parsing and bounds, which enrichment they build, and what they never do
(fail a collection because the kubelet is unreachable; poll on the simulated source)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.attribution.workloads import RESOLVERS
from exporter.catalogue.workloads import CONTAINERS, KINDS, KUBERNETES, SLURM, WorkloadKind
from exporter.cli import build_enricher, build_poller, parse_config
from exporter.config import ConfigError
from exporter.exposition.self_metrics import collection_success
from exporter.snapshot import Snapshot
from exporter.sources.simulated.scenario import ScenarioError, parse_scenario

#: A name no workload kind can have (a kind's name is a flag: no upper case, no space).
NO_KIND = "No Such Kind"


def config(*flags: str):  # type: ignore[no-untyped-def]
    return parse_config(["--source", "nvml", *flags], {})


def test_defaults() -> None:
    got = config()
    assert got.workload_labels.kinds == ()
    assert got.pod_resources_socket == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert got.pod_resources_interval == 5.0
    assert got.pod_resources_max_bytes == 16 * 1024 * 1024
    options = config("--slurm", "--containers").exposition_options()
    assert options.workload_labels.kinds == (CONTAINERS, SLURM)  # table order
    assert options.workload_labels.names == ("container", "container_id", "slurm_job")
    assert options.workload_labels.group_by == ("slurm_job",)
    assert config("--kubernetes").workload_labels.kinds == (KUBERNETES,)
    environment = parse_config(["--source", "nvml"], {"GPU_EXPORTER_SLURM": "true"})
    assert environment.workload_labels.kinds == (SLURM,)


@pytest.mark.parametrize(("flag", "message"), [
    ("--kubernetes.pod-resources-max-bytes=1073741824", r"out of range \(65536 to 268435456\)"),
    ("--kubernetes.pod-resources-max-bytes=1000", r"out of range \(65536 to 268435456\)"),
    ("--kubernetes.pod-resources-interval=200ms", r"out of range \(1s to 1d\)"),
    ("--kubernetes.pod-resources-interval=soon", "duration"),
])
def test_bad_values_are_clear_errors(flag: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(flag)


def test_poller_only_for_kubernetes_on_nvml_with_a_socket() -> None:
    assert build_poller(config()) is None
    assert build_poller(config("--kubernetes", "--kubernetes.pod-resources-socket=")) is None
    simulated = parse_config(["--source", "simulated", "--scenario", "kubernetes-node",
                              "--kubernetes"], {})
    assert build_poller(simulated) is None
    poller = build_poller(config("--kubernetes", "--kubernetes.pod-resources-interval=2s",
                                 "--kubernetes.gpu-resource=example.com/gpu, other.io/x"))
    assert poller is not None
    assert poller.interval_seconds == 2.0
    assert poller.client.extra_resource_names == frozenset({"example.com/gpu", "other.io/x"})
    enricher = build_enricher(config("--kubernetes"), poller)
    assert getattr(enricher, "allocations", None) is poller
    assert build_enricher(simulated, poller) is None


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_cgroups_are_read_for_any_attribution_flag(kind: WorkloadKind) -> None:
    enricher = build_enricher(config(f"--{kind.name}", "--slurm.allocation-dir="))
    assert getattr(enricher, "owners", None) is not None
    assert enricher.owners._cgroups  # type: ignore[union-attr]
    resolvers = enricher.resolvers  # type: ignore[union-attr]
    assert set(resolvers) == ({kind.name} & set(RESOLVERS))


def test_slurm_reads_the_allocation_directory_after_the_processes() -> None:
    chained = build_enricher(config("--slurm", "--slurm.allocation-dir=/run/jobs"))
    first, second = chained.enrichers  # type: ignore[attr-defined]
    assert first.owners._cgroups
    assert second.files.directory == "/run/jobs"
    assert second.user_name == first.owners.user_name
    assert build_enricher(config("--slurm.allocation-dir=/run/jobs")).owners is not None


def test_no_cgroups_without_an_attribution_flag() -> None:
    plain = build_enricher(config())
    assert not plain.owners._cgroups  # type: ignore[union-attr]


def test_kubelet_failures_never_fail_the_collection() -> None:
    base = Snapshot(source="nvml", hostname="h", taken_at=1.0, duration_seconds=0.1)
    assert collection_success(replace(base, errors={"pod_resources": 3}))
    assert not collection_success(replace(base, errors={"owner_lookup": 1}))


@pytest.mark.parametrize(("extra", "message"), [
    ({"allocations": [{"gpu": 5, "namespace": "a", "pod": "b", "container": "c"}]}, "gpu"),
    ({"allocations": [{"gpu": 0, "namespace": "a", "pod": "b"}]}, "container"),
    ({"processes": [{"gpu": 0, "user": "x", "container": {"name": "n", "id": "xyz"}}]}, "64"),
    ({"processes": [{"gpu": 0, "user": "x", "slurm_job": 913377}]}, "slurm_job"),
    ({"processes": [{"gpu": 0, "user": "x", "slurm_job": "1",
                     "pod": {"namespace": "a", "pod": "b", "container": "c"}}]}, "one workload"),
    ({"processes": [{"gpu": 0, "user": "x", "workload": {"kind": NO_KIND, "job": "1"}}]},
     f"unknown workload kind '{NO_KIND}'"),
    ({"processes": [{"gpu": 0, "user": "x", "workload": {"kind": "slurm", "pod": "p"}}]},
     "workload.pod: unknown key"),
    ({"processes": [{"gpu": 0, "user": "x", "workload": {"kind": "slurm"}}]}, "names none"),
    ({"processes": [{"gpu": 0, "user": "x", "workload": ["slurm"]}]}, "expected a mapping"),
])
def test_scenario_attribution_keys_are_checked(extra: dict[str, object], message: str) -> None:
    data = {"gpus": [{"model": "NVIDIA H200"}], **extra}
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(data, "test.yaml")
