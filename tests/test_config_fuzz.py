"""Every flag and environment variable, fuzzed: a value either parses or is one ConfigError
line naming the flag (and, for a number, its range); a value that parses lies in the flag's
range (``RANGES``); argparse errors are one line too (not the usage block)."""

from __future__ import annotations

import contextlib
import io
import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.config import FLAGS, ConfigError, Flag, build_parser, resolve
from exporter.values import RANGES, format_duration

TEXT = (st.text(max_size=40)
        | st.sampled_from(["0", "-1", "1e400", "nan", "inf", "1s", "-5s", "99999999999999999999d",
                           "::", "[::1]:99999", ":-1", "/", "/metrics", "\udcff\udcfe", " ",
                           "9" * 400, "true", "1.5", "0x10"]))


@settings(max_examples=600, deadline=None)
@given(flag=st.sampled_from(FLAGS), value=TEXT, via_env=st.booleans())
def test_any_value_of_any_flag_parses_or_is_one_config_error(flag: object, value: str,
                                                             via_env: bool) -> None:
    name = flag.name  # type: ignore[attr-defined]
    env = {flag.env: value} if via_env else {}  # type: ignore[attr-defined]
    argv = [] if via_env else ([f"--{name}" if value.lower() != "false" else f"--no-{name}"]
                               if flag.is_bool else [f"--{name}={value}"])  # type: ignore[attr-defined]
    message = ""
    try:
        namespace = build_parser().parse_args(argv)
        resolve(namespace, env)
    except ConfigError as exc:
        message = str(exc)
    assert "\n" not in message
    assert message.isprintable()


def test_argparse_errors_are_one_line() -> None:
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), pytest.raises(SystemExit) as info:
        build_parser().parse_args(["--web.listen-address"])
    assert info.value.code == 2
    lines = stderr.getvalue().splitlines()
    assert lines == ["gpu-exporter: error: argument --web.listen-address: expected one "
                     "argument (see --help)"]


def test_non_utf8_values_are_refused_except_for_paths() -> None:
    with pytest.raises(ConfigError, match="not valid UTF-8"):
        resolve(build_parser().parse_args(["--hostname", "gpu\udcff"]), {})
    with pytest.raises(ConfigError, match=r"GPU_EXPORTER_HOSTNAME.*not valid UTF-8"):
        resolve(build_parser().parse_args([]), {"GPU_EXPORTER_HOSTNAME": "gpu\udcff"})
    config = resolve(build_parser().parse_args(["--passwd-file", "/tmp/p\udcff"]), {})
    assert config.passwd_file == "/tmp/p\udcff"  # file names may be any bytes


_UNITS = ("ms", "s", "m", "h", "d", "w")


def typed_values(flag: Flag) -> st.SearchStrategy[str]:
    """Values of the flag's own type (in range, at and beyond its ends, extremes) and of wrong
    types (text, non-UTF-8 bytes as surrogates, numbers where durations belong)."""
    wrong = (st.text(max_size=20) | st.sampled_from(
        ["", " ", "\udcff\udcfe", "nan", "inf", "-inf", "1e400", "0x10", "1_000", "true"]))
    limits = RANGES.get(flag.name)
    if flag.metavar == "DURATION":
        assert limits is not None
        count = (st.integers(0, 10**30).map(str)
                 | st.floats(0, 1e6, allow_nan=False).map(lambda v: f"{v:.3f}"))
        made = st.tuples(st.sampled_from(["", "-"]), count, st.sampled_from(_UNITS)).map(
            "".join)
        ends = st.sampled_from([limits.low, limits.high, limits.low / 2, limits.high * 2,
                                limits.high + 1]).map(lambda v: format_duration(abs(v)))
        return made | ends | wrong
    if flag.metavar in ("N", "FACTOR"):
        assert limits is not None
        numbers = (st.integers(-(2**70), 2**70) | st.integers(-3, 3)
                   | st.sampled_from([limits.low - 1, limits.low, limits.high,
                                      limits.high + 1]).map(int))
        floats = st.floats(allow_nan=True, allow_infinity=True).map(repr)
        return numbers.map(str) | floats | wrong
    return wrong | st.sampled_from(["/", "/dev/zero", "a" * 300])


@st.composite
def flag_and_value(draw: st.DrawFn) -> tuple[Flag, str]:
    flag = draw(st.sampled_from(FLAGS))
    return flag, draw(typed_values(flag))


def _in_range(flag: Flag, value: Any) -> bool:
    limits = RANGES[flag.name]
    return (not isinstance(value, float) or math.isfinite(value)) and (
        limits.low <= value <= limits.high)


@settings(max_examples=800, deadline=None)
@given(case=flag_and_value(), via_env=st.booleans())
def test_typed_values_parse_into_range_or_name_the_flag_and_range(
        case: tuple[Flag, str], via_env: bool) -> None:
    flag, value = case
    env = {flag.env: value} if via_env else {}
    argv = [] if via_env else ([f"--{flag.name}"] if flag.is_bool else [f"--{flag.name}", value])
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            config = resolve(build_parser().parse_args(argv), env)
    except ConfigError as exc:
        message = str(exc)
        assert "\n" not in message
        assert message.isprintable()
        assert flag.env in message or f"--{flag.name}" in message
        if flag.name in RANGES and "out of range" in message:
            assert f"({RANGES[flag.name]})" in message
        return
    except SystemExit as exc:
        # argparse: "--flag -x" where -x is no number ("--flag=-x" passes it as a value)
        code = exc.code
        assert code == 2
        assert value.startswith("-")
        assert not re.match(r"-\.?[0-9]", value)
        assert stderr.getvalue() == (f"gpu-exporter: error: argument --{flag.name}: expected "
                                     "one argument (see --help)\n")
        return
    if flag.name in RANGES:
        assert _in_range(flag, getattr(config, flag.dest))
