"""``promtool check metrics`` on the text output reports nothing."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from exporter.attribution.workloads import select
from exporter.catalogue.metrics import Group
from exporter.exposition import MetricsRenderer
from exporter.state import ExpositionOptions
from tests.exposition import factory

PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus)")
@pytest.mark.parametrize(
    "options",
    [
        ExpositionOptions(groups=frozenset(Group), workload_labels=select("kubernetes")),
        ExpositionOptions(pid_label=False, max_process_series_per_gpu=4),
    ],
)
def test_promtool_check_metrics_is_clean(options: ExpositionOptions) -> None:
    assert PROMTOOL is not None
    snap = factory.fleet(2, 8)
    lost = factory.reading(2, up=False, error="lost")
    state = factory.state(factory.snapshot(*snap.gpus, lost))
    body, _ = MetricsRenderer().render(state, options)
    result = subprocess.run(
        [PROMTOOL, "check", "metrics"],
        input=body,
        capture_output=True,
        timeout=60,
        check=False,
    )
    report = (result.stdout + result.stderr).decode()
    assert result.returncode == 0, report
    assert report.strip() == ""
