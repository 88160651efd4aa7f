"""Every flag and environment variable, fuzzed: a value either parses or is one ConfigError
line; argparse errors are one line too (not the usage block)."""

from __future__ import annotations

import contextlib
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.config import FLAGS, ConfigError, build_parser, resolve

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
