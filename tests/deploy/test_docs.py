"""docs/deploy.md matches the chart and the catalogue it talks about."""

from __future__ import annotations

import re

import yaml

from exporter.catalogue.metrics import BY_NAME
from exporter.config import FLAGS
from tests.deploy.helm_render import CHART_DIR
from tests.deploy.stack import REPO

DOC = REPO / "docs" / "deploy.md"
#: Options of other programs the page shows (helm, docker, buildah, pip).
OTHER_TOOLS = {"set", "set-json", "api-versions", "gpus", "pid", "user", "no-deps", "check",
               "format", "build-arg", "entrypoint"}
#: Python packages of this repository (gpu_exporter_torch reads like a metric name).
PACKAGES = {path.name for path in REPO.iterdir() if (path / "__init__.py").is_file()}


def test_every_value_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text(encoding="utf-8"))
    for key in values:
        assert f"`{key}" in text, f"docs/deploy.md does not mention the value {key}"


def test_metric_names_exist() -> None:
    names = set(re.findall(r"\bgpu_[a-z0-9_]+", DOC.read_text(encoding="utf-8"))) - PACKAGES
    assert names
    assert names <= set(BY_NAME), names - set(BY_NAME)


def test_flags_exist() -> None:
    text = DOC.read_text(encoding="utf-8")
    known = {f.name for f in FLAGS} | {f"no-{f.name}" for f in FLAGS if f.is_bool}
    flags = set(re.findall(r"`--([a-z][a-z0-9.-]*)", text)) - OTHER_TOOLS
    assert flags
    assert flags <= known, flags - known
