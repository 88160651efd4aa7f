"""Flag/environment parsing into ``Config``: values, precedence, contradictions."""

from __future__ import annotations

import argparse
import asyncio
import math
import threading
import time

import pytest

from exporter.catalogue.metrics import OPT_IN_GROUPS, Group
from exporter.catalogue.workloads import KUBERNETES
from exporter.config import (
    FLAGS,
    Config,
    ConfigError,
    attach_negative_values,
    build_parser,
    flags_markdown_table,
    resolve,
    unknown_env,
)
from exporter.values import (
    RANGES,
    ListenAddress,
    Range,
    format_duration,
    parse_bool,
    parse_duration,
    parse_listen_address,
)


def _resolve(argv: list[str], env: dict[str, str] | None = None) -> Config:
    namespace: argparse.Namespace = build_parser().parse_args(argv)
    return resolve(namespace, env or {})


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("500ms", 0.5), ("5s", 5.0), ("1m", 60.0), ("1m30s", 90.0), ("2h", 7200.0), ("0", 0.0),
     ("1.5s", 1.5), ("1d", 86400.0)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(("text", "seconds"), [("-1s", -1.0), ("-1m30s", -90.0), ("-0", 0.0)])
def test_parse_duration_reads_negatives_for_the_range_check(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "5x", "s", "--1s", "-", "1s2", "1 s", "ms5", "1e3s"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [(":9477", None, 9477), ("127.0.0.1:80", "127.0.0.1", 80), ("[::1]:9000", "::1", 9000),
     ("localhost:0", "localhost", 0), ("0.0.0.0:9477", "0.0.0.0", 9477)],
)
def test_parse_listen_address(text: str, host: str | None, port: int) -> None:
    address = parse_listen_address(text)
    assert (address.host, address.port) == (host, port)
    assert parse_listen_address(str(address)) == address  # str() round-trips


@pytest.mark.parametrize("text", ["9477", "host:", "host:99999", "[::1]", "a:b:c", "::1:80", ""])
def test_parse_listen_address_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=r"port|host"):
        parse_listen_address(text)


def test_parse_bool() -> None:
    assert parse_bool("TRUE") is True
    assert parse_bool("1") is True
    assert parse_bool("false") is False
    assert parse_bool("0") is False
    with pytest.raises(ValueError, match="not a boolean"):
        parse_bool("maybe")


def test_flag_defaults_match_config_defaults() -> None:
    assert _resolve([]) == Config()


def test_default_groups_leave_energy_and_pcie_off() -> None:
    config = _resolve([])
    assert OPT_IN_GROUPS.isdisjoint(config.groups)
    assert Group.MEMORY in config.groups
    assert Group.EXPORTER not in config.groups  # always on, added by exposition_options()
    assert Group.EXPORTER in config.exposition_options().groups


def test_every_group_but_exporter_has_a_switch() -> None:
    names = {f.name for f in FLAGS}
    for group in Group:
        assert (f"collector.{group.value}" in names) == (group is not Group.EXPORTER)


def test_collector_switches_map_to_collect_groups() -> None:
    config = _resolve(["--collector.energy", "--no-collector.fan", "--collector.pcie"])
    groups = config.collect_groups()
    assert {Group.ENERGY, Group.PCIE, Group.MEMORY} <= groups
    assert Group.FAN not in groups
    no_procs = _resolve(["--no-collector.processes"]).collect_groups()
    assert Group.PROCESSES not in no_procs
    assert Group.PROCESS_UTILIZATION not in no_procs  # meaningless without the process list


def test_values_from_flags() -> None:
    config = _resolve([
        "--web.listen-address", "127.0.0.1:9999", "--web.telemetry-path", "/m",
        "--collector.min-interval", "250ms", "--collector.timeout", "2s",
        "--collector.stale-after", "1m", "--process.max-series-per-gpu", "8",
        "--no-process.pid-label", "--kubernetes", "--log.level", "DEBUG",
        "--log.format", "json", "--source", "simulated", "--scenario", "x",
        "--simulate.speed", "60", "--simulate.seed", "3",
    ])
    assert config.listen_address == ListenAddress("127.0.0.1", 9999)
    assert config.telemetry_path == "/m"
    assert (config.min_interval, config.timeout, config.stale_after) == (0.25, 2.0, 60.0)
    assert config.log_level == "debug"
    assert (config.simulate_speed, config.simulate_seed) == (60.0, 3)
    options = config.exposition_options()
    assert options.max_process_series_per_gpu == 8
    assert not options.pid_label
    assert options.workload_labels.kinds == (KUBERNETES,)


def test_environment_variables_and_precedence() -> None:
    env = {
        "GPU_EXPORTER_WEB_LISTEN_ADDRESS": "127.0.0.1:1234",
        "GPU_EXPORTER_COLLECTOR_ENERGY": "true",
        "GPU_EXPORTER_PROCESS_PID_LABEL": "0",
        "GPU_EXPORTER_COLLECTOR_MIN_INTERVAL": "2s",
    }
    config = _resolve([], env)
    assert config.listen_address.port == 1234
    assert Group.ENERGY in config.groups
    assert not config.pid_label
    assert config.min_interval == 2.0
    flags_win = _resolve(["--web.listen-address", ":80", "--no-collector.energy"], env)
    assert flags_win.listen_address == ListenAddress(None, 80)
    assert Group.ENERGY not in flags_win.groups


def test_env_names_follow_the_flag_names() -> None:
    envs = {f.name: f.env for f in FLAGS}
    assert envs["web.listen-address"] == "GPU_EXPORTER_WEB_LISTEN_ADDRESS"
    assert envs["collector.process_utilization"] == "GPU_EXPORTER_COLLECTOR_PROCESS_UTILIZATION"
    assert len(set(envs.values())) == len(envs)


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--collector.timeout", "soon"], {}, "--collector.timeout"),
        (["--collector.timeout", "0"], {}, r"'0' is out of range \(1ms to 1h\)"),
        (["--web.max-requests", "-1"], {}, "--web.max-requests"),
        (["--web.telemetry-path", "metrics"], {}, "absolute URL path"),
        (["--web.telemetry-path", "/healthz"], {}, "already served"),
        (["--source", "dcgm"], {}, "--source"),
        (["--source", "simulated"], {}, "needs --scenario"),
        (["--scenario", "busy"], {}, "only applies to --source simulated"),
        (["--simulate.speed", "0", "--source", "simulated", "--scenario", "x"], {},
         r"--simulate.speed: '0' is out of range \(0.001 to 1000000\)"),
        ([], {"GPU_EXPORTER_COLLECTOR_ENERGY": "perhaps"}, "GPU_EXPORTER_COLLECTOR_ENERGY"),
        ([], {"GPU_EXPORTER_WEB_LISTEN_ADDRESS": "nowhere"}, "GPU_EXPORTER_WEB_LISTEN_ADDRESS"),
        ([], {"GPU_EXPORTER_LOG_LEVEL": "loud"}, "GPU_EXPORTER_LOG_LEVEL"),
        ([], {"GPU_EXPORTER_HOSTNAME": "two words"}, "GPU_EXPORTER_HOSTNAME"),
    ],
)
def test_bad_values_raise_one_clear_line(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        _resolve(argv, env)
    assert "\n" not in str(info.value)


def test_hostname_from_flag_or_environment() -> None:
    assert _resolve([]).hostname is None
    assert _resolve(["--hostname", "gpu-node-7"]).hostname == "gpu-node-7"
    assert _resolve([], {"GPU_EXPORTER_HOSTNAME": "node-a"}).hostname == "node-a"


def test_unknown_env_lists_typos_only() -> None:
    env = {"GPU_EXPORTER_WEB_LISTEN_ADRESS": "x", "GPU_EXPORTER_SOURCE": "nvml", "HOME": "/"}
    assert unknown_env(env) == ["GPU_EXPORTER_WEB_LISTEN_ADRESS"]


def test_flags_table_lists_every_flag() -> None:
    table = flags_markdown_table()
    for flag in FLAGS:
        assert f"{flag.name}`" in table
        assert flag.env in table
    assert "`--[no-]collector.energy`" in table


# --- the range table ------------------------------------------------------------------------

_NUMERIC = ("N", "DURATION", "FACTOR")
_WEB_CONFIG_KEYS = {"rate_limit.interval", "rate_limit.burst"}  # exporter/web/webconfig.py


def _text(limits: Range, value: float) -> str:
    if limits.duration:
        return ("-" if value < 0 else "") + format_duration(abs(value))
    return str(int(value)) if float(value).is_integer() else repr(value)


def test_every_number_a_flag_reads_has_a_range_and_every_range_a_reader() -> None:
    numeric = {flag.name for flag in FLAGS if flag.metavar in _NUMERIC}
    assert numeric == RANGES.keys() - _WEB_CONFIG_KEYS
    for flag in FLAGS:
        assert (flag.metavar == "DURATION") == (flag.name in RANGES and RANGES[flag.name].duration)


def test_every_range_is_what_the_code_can_represent() -> None:
    lock = threading.Lock()
    loop = asyncio.new_event_loop()
    try:
        for name, limits in RANGES.items():
            assert math.isfinite(limits.low), name
            assert math.isfinite(limits.high), name
            assert limits.low <= limits.high, name
            if limits.duration:  # a timeout threading and asyncio accept (no OverflowError)
                assert lock.acquire(timeout=limits.high), name
                lock.release()
                loop.call_later(limits.high, lambda: None).cancel()
                assert time.monotonic() + limits.high < 2**62  # time_t
            else:
                assert limits.high <= 2**63 - 1, name  # a C long: counts, seeds, rlimits
    finally:
        loop.close()


@pytest.mark.parametrize("name", sorted(RANGES.keys() - _WEB_CONFIG_KEYS))
def test_range_ends_parse_and_beyond_them_is_one_line_naming_flag_and_range(name: str) -> None:
    flag = next(f for f in FLAGS if f.name == name)
    limits = RANGES[name]
    for value in (limits.low, limits.high):
        config = _resolve([f"--{name}", _text(limits, value)])
        assert getattr(config, flag.dest) == pytest.approx(value)
    step = 0.001 if limits.duration or not float(limits.low).is_integer() else 1
    beyond = [_text(limits, limits.low - step), _text(limits, limits.high * 2 + step),
              "9" * 400 + ("s" if limits.duration else "")]
    if not limits.duration:
        beyond += ["inf", "nan"] if not float(limits.low).is_integer() else []
    for text in beyond:
        for argv, env, origin in (([f"--{name}", text], {}, f"--{name}"),
                                  ([], {flag.env: text}, flag.env)):
            with pytest.raises(ConfigError) as info:
                _resolve(argv, env)
            message = str(info.value)
            assert message.startswith(f"invalid value for {origin}: "), message
            assert message.endswith(f"is out of range ({limits})"), message
            assert "\n" not in message
            assert len(message) < 200


def test_negative_durations_after_a_space_reach_the_range_check() -> None:
    with pytest.raises(ConfigError) as info:
        _resolve(["--web.read-header-timeout", "-1s"])
    assert str(info.value) == ("invalid value for --web.read-header-timeout: '-1s' is out of "
                               "range (1ms to 1d)")
    assert attach_negative_values(["--collector.timeout", "-5s", "--web.max-requests", "-1",
                                   "--simulate.speed", "-.5"]) == [
        "--collector.timeout=-5s", "--web.max-requests=-1", "--simulate.speed=-.5"]
    # anything else after a flag stays argparse's: an option, or a missing value
    assert attach_negative_values(["--web.config.file", "--source", "simulated"]) == [
        "--web.config.file", "--source", "simulated"]
    assert attach_negative_values(["--kubernetes", "-1"]) == ["--kubernetes", "-1"]


def test_durations_are_shown_as_they_are_written() -> None:
    assert [format_duration(v) for v in (0, 0.001, 1, 90, 3600, 86400, 604800, 1.5)] == [
        "0s", "1ms", "1s", "90s", "1h", "1d", "1w", "1500ms"]
    assert str(RANGES["web.read-header-timeout"]) == "1ms to 1d"
    assert str(RANGES["web.max-connections"]) == "1 to 1048576"


def test_help_and_flag_table_show_the_ranges() -> None:
    assert "Range: 1ms to 1h." in flags_markdown_table()
    assert "range 1ms to 1h" in " ".join(build_parser().format_help().split())
