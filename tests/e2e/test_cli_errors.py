"""Bad flags, environment values, files and scenarios: exit 2 with one clear last line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.server import run_exporter
from tests.processes import last_line

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--no-such-flag"], {}, "unrecognized arguments: --no-such-flag"),
        (["--web.listen-address", "localhost"], {}, "--web.listen-address"),
        (["--collector.timeout", "5 seconds"], {}, "not a duration"),
        (["--source", "simulated"], {}, "--source simulated needs --scenario"),
        (["--source", "simulated", "--scenario", "nope"], {}, "no such scenario"),
        (["--passwd-file", "/nonexistent/passwd"], {}, "passwd"),
        ([], {"GPU_EXPORTER_WEB_MAX_REQUESTS": "many"}, "GPU_EXPORTER_WEB_MAX_REQUESTS"),
        ([], {"GPU_EXPORTER_PROCESS_PID_LABEL": "sometimes"}, "GPU_EXPORTER_PROCESS_PID_LABEL"),
    ],
)
def test_bad_input_exits_2(args: list[str], env: dict[str, str], message: str) -> None:
    result = run_exporter(args, env)
    assert result.returncode == 2
    assert message in last_line(result.stderr)
    assert "Traceback" not in result.stderr


def test_bad_scenario_file_names_the_field(tmp_path: Path) -> None:
    scenario = tmp_path / "broken.yaml"
    scenario.write_text("gpus:\n  - model: NVIDIA H100 80GB HBM3\n    colour: red\n",
                        encoding="utf-8")
    result = run_exporter(["--source", "simulated", "--scenario", str(scenario)])
    assert result.returncode == 2
    line = last_line(result.stderr)
    assert "broken.yaml" in line
    assert "colour" in line


def test_version_and_help_exit_0() -> None:
    version = run_exporter(["--version"])
    assert version.returncode == 0
    assert version.stdout.startswith("gpu-exporter ")
    helptext = run_exporter(["--help"])
    assert helptext.returncode == 0
    # presets are listed (argparse may wrap a line after a hyphen)
    assert "shared-workstation" in helptext.stdout.replace("-\n", "-")
