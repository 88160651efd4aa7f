"""The CLI in-process: exit statuses and messages, source/enricher wiring, binding.

Starting the real server is covered by ``tests/e2e``.
"""

from __future__ import annotations

import errno
import logging
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter import __version__, cli
from exporter.attribution.enrich import ProcessEnricher, _Chain
from exporter.attribution.torchstats import TorchEnricher
from exporter.attribution.torchtotals import TorchUserTotals
from exporter.attribution.workloads import select
from exporter.catalogue.metrics import Group, default_groups
from exporter.cli import bind, build_enricher, build_source, main, parse_config
from exporter.config import Config
from exporter.sources.simulated.scenario import list_presets
from exporter.values import ListenAddress
from tests.processes import last_line


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert __version__ in capsys.readouterr().out


def test_help_lists_flags_and_presets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "--web.listen-address" in out
    assert "GPU_EXPORTER_WEB_LISTEN_ADDRESS" in out
    assert "synthetic:<gpus>x<processes>" in out
    unwrapped = re.sub(r"-\n\s*", "-", out)  # argparse may wrap a preset name at its hyphen
    for preset in list_presets():
        assert preset in unwrapped


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--web.listen-address"], "expected one argument"),
        (["--web.listen-address", "9477"], "--web.listen-address"),
        (["--collector.min-interval", "fast"], "not a duration"),
        (["--source", "simulated"], "needs --scenario"),
        (["--source", "simulated", "--scenario", "no-such-preset"], "no such scenario"),
        (["--passwd-file", "/nonexistent/passwd"], "--passwd-file"),
        (["--procfs", "/nonexistent"], "--procfs"),
        (["report", "--prometheus.url", "ftp://x"], "expected http(s)://host:port"),
        (["report", "--prometheus.password-file", "/nonexistent"], "needs --prometheus.username"),
        (["report", "--prometheus.url", "https://127.0.0.1:1", "--prometheus.ca-file",
          "/nonexistent"], "--prometheus.ca-file: cannot load"),
        (["report", "--prometheus.username", "u", "--prometheus.password-file", "/nonexistent"],
         "--prometheus.password-file /nonexistent: cannot read it"),
        (["report", "--prometheus.key-file", "/k"], "needs --prometheus.cert-file"),
        (["report", "--prometheus.timeout", "soon"], "is not a duration"),
        (["report", "--top", "-1"], "--top must be 0 or more"),
        (["report", "--match", '{job="x"}'], "without braces"),
        (["report", "--since", "1d", "--start", "2026-01-01"], "not both"),
        (["report", "--start", "yesterday"], "is not a time"),
        (["report", "--since", "400d"], "longer than a year"),
    ],
)
def test_bad_input_exits_2_with_one_clear_last_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in last_line(err)
    assert "Traceback" not in err
    if argv[0] == "report":  # the report prints no usage text: its refusal is the one line
        assert err.strip() == last_line(err)
        assert err.startswith("gpu-exporter report: error: ")


def test_missing_scenario_lists_the_presets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--source", "simulated"]) == 2
    line = last_line(capsys.readouterr().err)
    assert list_presets()
    for preset in list_presets():
        assert preset in line


def test_bad_env_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPU_EXPORTER_COLLECTOR_TIMEOUT", "forever")
    assert main([]) == 2
    assert "GPU_EXPORTER_COLLECTOR_TIMEOUT" in last_line(capsys.readouterr().err)


def test_bad_scenario_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus: [{model: NoSuchGPU}]\n", encoding="utf-8")
    assert main(["--source", "simulated", "--scenario", str(bad)]) == 2
    line = last_line(capsys.readouterr().err)
    assert line.startswith("gpu-exporter: error: --scenario:")
    assert "bad.yaml" in line


@pytest.fixture
def _restore_logging() -> Iterator[None]:
    """main() installs its own root handler; put pytest's back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.usefixtures("_restore_logging")
@pytest.mark.parametrize("host", ["127.0.0.1", "no-such-host.invalid"])
def test_a_busy_or_unresolvable_listen_address_exits_2_with_one_line(
        host: str, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        argv = ["--source", "simulated", "--scenario", "synthetic:1x1",
                "--web.listen-address", f"{host}:{port}"]
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert last_line(err).startswith(f"gpu-exporter: error: --web.listen-address: cannot "
                                     f"listen on {host}:{port}: ")
    assert "Traceback" not in err


def test_synthetic_scenario_builds_a_fleet() -> None:
    config = parse_config(["--source", "simulated", "--scenario", "synthetic:3x5"], {})
    source = build_source(config)
    source.start()
    snapshot = source.collect(default_groups())
    assert snapshot.source == "simulated"
    assert len(snapshot.gpus) == 3
    assert all(len(g.processes) <= 5 for g in snapshot.gpus)
    assert sum(len(g.processes) for g in snapshot.gpus) > 0
    source.close()


def test_presets_load() -> None:
    for preset in list_presets():
        config = parse_config(["--source", "simulated", "--scenario", preset], {})
        assert build_source(config).name == "simulated"


def test_enrichers_follow_the_source() -> None:
    assert build_enricher(Config(source="simulated", scenario="x")) is None
    plain = build_enricher(Config())
    assert isinstance(plain, ProcessEnricher)
    assert plain.resolvers == {}
    kube = build_enricher(Config(workload_labels=select("kubernetes")))
    assert isinstance(kube, ProcessEnricher)
    assert set(kube.resolvers) == {"kubernetes"}


def test_torch_group_adds_the_allocator_join_with_its_flags(tmp_path: Path) -> None:
    config = parse_config(["--collector.torch", "--torch.dir", str(tmp_path),
                           "--torch.max-age", "2m", "--torch.max-files", "10"], {})
    assert Group.TORCH in config.groups
    assert (config.torch_dir, config.torch_max_age, config.torch_max_files) == (
        str(tmp_path), 120.0, 10)
    chained = build_enricher(config)
    assert isinstance(chained, _Chain)
    owners, torch, totals = chained.enrichers
    assert isinstance(owners, ProcessEnricher)
    assert isinstance(torch, TorchEnricher)
    assert isinstance(totals, TorchUserTotals)  # after the join: it sums the joined counters
    assert torch.reader.directory == str(tmp_path)
    simulated = ["--source", "simulated", "--scenario", "calm"]
    assert isinstance(build_enricher(parse_config([*simulated, "--collector.torch"], {})),
                      TorchUserTotals)
    assert build_enricher(parse_config(simulated, {})) is None
    assert Group.TORCH not in parse_config([], {}).groups  # opt-in
    env = parse_config(["--collector.torch"], {"GPU_EXPORTER_TORCH_DIR": "/srv/torch"})
    assert env.torch_dir == "/srv/torch"  # the publisher's variable names the same directory


@pytest.mark.parametrize("flag", ["--torch.max-age=0s", "--torch.max-files=0",
                                  "--torch.max-age=soon"])
def test_bad_torch_flags_exit_2(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([flag]) == 2
    assert "torch.max-" in capsys.readouterr().err


def test_nvml_source_is_built_lazily() -> None:
    source = build_source(Config())
    assert source.name == "nvml"  # nothing touches NVML until start()


def test_bind_loopback() -> None:
    sock = bind(ListenAddress("127.0.0.1", 0))
    try:
        host, port = sock.getsockname()[:2]
        assert host == "127.0.0.1"
        assert port > 0
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
        with pytest.raises(OSError, match="in use"):
            bind(ListenAddress("127.0.0.1", port))
    finally:
        sock.close()
    with pytest.raises(socket.gaierror):
        bind(ListenAddress("no-such-host.invalid", 0))


def test_every_interface_falls_back_to_ipv4_without_ipv6(monkeypatch: pytest.MonkeyPatch) -> None:
    """No real socket: binding every interface is not allowed in tests."""
    calls: list[tuple[int, tuple[object, ...]]] = []
    sentinel = object()

    def fake_listen(family: int, kind: int, proto: int, target: tuple[object, ...],
                    dual_stack: bool = False) -> object:
        calls.append((family, target))
        if family == socket.AF_INET6:
            raise OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")
        return sentinel

    monkeypatch.setattr(cli, "_listen", fake_listen)
    assert bind(ListenAddress(None, 9477)) is sentinel
    assert calls == [(socket.AF_INET6, ("::", 9477)), (socket.AF_INET, ("0.0.0.0", 9477))]

    def in_use(family: int, kind: int, proto: int, target: tuple[object, ...],
               dual_stack: bool = False) -> object:
        raise OSError(errno.EADDRINUSE, "Address already in use")

    monkeypatch.setattr(cli, "_listen", in_use)
    with pytest.raises(OSError, match="in use"):
        bind(ListenAddress(None, 9477))  # a real conflict is not papered over by IPv4


@pytest.mark.usefixtures("_restore_logging")
def test_a_uvicorn_lacking_what_the_server_relies_on_is_refused_with_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol  # noqa: PLC0415

    from exporter.web import protocol  # noqa: PLC0415

    changed = {**protocol.UVICORN_CONTRACT[HttpToolsProtocol], "on_headers_done": ()}
    monkeypatch.setitem(protocol.UVICORN_CONTRACT, HttpToolsProtocol, changed)
    argv = ["--source", "simulated", "--scenario", "synthetic:1x1",
            "--web.listen-address", "127.0.0.1:0"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert last_line(err).startswith("gpu-exporter: error: uvicorn ")
    assert "HttpToolsProtocol.on_headers_done() is gone" in last_line(err)
