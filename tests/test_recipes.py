"""The docs' recipes, performed on a scratch copy of the repository.

Each recipe's doc says how many files a change of its kind edits by hand
(``**Edited by hand: N files**``) and names them. Here each recipe is done for a toy example
exactly that way: the edits below and nothing else, then ``python -m dashboards.generate``,
then the checks that ask for anything a change of that kind leaves out (the row tests, the
golden files, promtool, the dashboard model, the workload kinds' outputs). The test fails
when the recipe needs a file its doc does not name, more files than its doc states, or when
the checks fail: a table kept by hand somewhere else, a test that hard-codes the built-in
kinds, a document written by hand that the generator should write.

The copy holds the tracked files of what the generator and the checks read; the checks run
in it with this interpreter (the copy's packages come first on ``sys.path``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: What the copy holds (tracked files only).
COPIED = ("exporter", "dashboards", "tests", "docs", "helm/gpu-exporter/files",
          "helm/gpu-exporter/values.yaml", "helm/gpu-exporter/values.schema.json", "README.md",
          "pyproject.toml")

@dataclass(frozen=True)
class Edit:
    """Put ``text`` in ``path`` before (or in place of) the one occurrence of ``anchor``."""

    path: str
    anchor: str
    text: str
    replace: bool = False


@dataclass(frozen=True)
class Recipe:
    doc: str  # the document stating the recipe
    section: str | None  # its heading there (None: the whole document)
    edits: tuple[Edit, ...]
    shows: tuple[tuple[str, str], ...]  # (generated file, text): the toy reached it
    checks: tuple[str, ...]  # pytest arguments run in the copy


# --- a metric: BAR1 free, another attribute of a call the NVML source already makes ------------
METRIC = Recipe(
    "docs/adding-a-metric.md", None,
    (
        Edit("exporter/catalogue/metrics/gpu.py",
             'UTILIZATION = Metric(\n    "gpu_utilization_ratio"', '''\
BAR1_FREE = Metric(
    "gpu_memory_bar1_free_bytes", Kind.GAUGE, Group.BAR1,
    "BAR1 memory not mapped, in bytes (opt-in, with the other BAR1 rows).",
    nvml=nvml("nvmlDeviceGetBAR1MemoryInfo", attribute="bar1Free"),
    json_field="memory_bar1_free_bytes", json_type=int,
    charted=False,
)
'''),
        Edit("exporter/sources/simulated/rows.py", "    metrics.UTILIZATION.name:", '''\
    metrics.BAR1_FREE.name: lambda gpu: (1 << (gpu.memory_total_bytes - 1).bit_length())
    - 1_703_936 - (gpu.processes << 21),
'''),
    ),
    (("docs/metrics.md", "| `gpu_memory_bar1_free_bytes` |"),
     ("tests/golden/training-node.prom", "\ngpu_memory_bar1_free_bytes{")),
    ("tests/catalogue", "tests/exposition/test_golden.py", "tests/test_docs.py",
     "-k", "gpu_memory_bar1_free_bytes or test_index or test_golden or test_docs"),
)

# --- a panel: power as a share of the limit, on the node dashboard ------------------------------
PANEL = Recipe(
    "dashboards/README.md", "Adding a panel",
    (Edit("dashboards/node.py", '''    grid.add(panels.timeseries_panel(
        "Performance state"''', '''\
    grid.add(panels.timeseries_panel(
        "Power / limit", "Power drawn as a share of the enforced limit: a GPU pinned near 1 "
        "runs at its power cap.", "percentunit",
        [panels.query(f"{_on_gpus(metrics.POWER_USAGE)} / {_on_gpus(metrics.POWER_LIMIT)}",
                      GPU_LEGEND)],
        min_val=0,
    ), 12)
'''),),
    (("dashboards/grafana/gpu-node-device.json", '"title": "Power / limit"'),),
    ("tests/dashboards/test_dashboard_json.py",),
)

# --- an alert with its promtool test: a GPU hot while idle (its cooling failed) ----------------
_LABELS = 'job: gpu-exporter, instance: "h1:9477"'


def _series(metric: str, gpu: int, values: str) -> str:
    """One input series of a promtool test, on host h1 (GPU ``gpu``, UUID GPU-a, GPU-b, ...)."""
    labels = f'job="gpu-exporter", instance="h1:9477", gpu="{gpu}", uuid="GPU-{"ab"[gpu]}"'
    return f"      - series: '{metric}{{{labels}}}'\n        values: '{values}'"


ALERT = Recipe(
    "dashboards/README.md", "Adding an alert",
    (
        Edit("dashboards/alerts.py", '    return RuleGroup("gpu-thermal", ', '''\
    hot_idle = AlertRule(
        alert="GpuHotWhileIdle",
        expr=(
            f"{temp} > {num(thresholds.TEMPERATURE_WARNING_CELSIUS)}\\n"
            f"and {metrics.UTILIZATION.name} < {num(thresholds.IDLE_UTILIZATION_RATIO)}\\n"
        ),
        for_=thresholds.TEMPERATURE_WARNING_FOR,
        severity="warning",
        audience="operator",
        summary="A GPU is hot while it does nothing.",
        description=f"{GPU_TEXT} is at {{{{ $value }}}} °C while idle: its cooling failed.",
        when="> 80 °C while utilisation < 5 %, for 5m",
        live=not_live("no bundled scenario lets an idle GPU overheat"),
        runbook="""\\
**Meaning:** the GPU is above 80 °C although nothing runs on it. **Impact:** the next job on
it starts throttled. Check its fans (`gpu_fan_speed_ratio`) and the airflow of the chassis.
""",
    )
'''),
        Edit("dashboards/alerts.py", "(high, critical, thermal, hardware, power_cap))",
             "(high, critical, thermal, hardware, power_cap, hot_idle))", replace=True),
        Edit("dashboards/rules/tests/thermal.test.yaml", "", f'''
  - name: above 80 degC while idle for 5m warns; hot and busy does not
    interval: 1m
    input_series:
{_series("gpu_temperature_celsius", 0, "85x20")}
{_series("gpu_utilization_ratio", 0, "0x20")}
{_series("gpu_temperature_celsius", 1, "85x20")}
{_series("gpu_utilization_ratio", 1, "0.9x20")}
    alert_rule_test:
      - eval_time: 4m
        alertname: GpuHotWhileIdle
        exp_alerts: []
      - eval_time: 6m
        alertname: GpuHotWhileIdle
        exp_alerts:
          - exp_labels: {{severity: warning, audience: operator, {_LABELS}, gpu: "0", uuid: GPU-a}}
'''),
    ),
    (("dashboards/rules/gpu-exporter-alerts.yaml", "alert: GpuHotWhileIdle"),
     ("dashboards/runbooks/gpu-exporter-alerts.md", "## GpuHotWhileIdle\n"),
     ("dashboards/README.md", "| `GpuHotWhileIdle` | warning |"),
     ("helm/gpu-exporter/files/rules/gpu-exporter-alerts.yaml", "alert: GpuHotWhileIdle")),
    ("tests/dashboards/test_rules.py",),
)

# --- a workload kind: PBS jobs (as tests/attribution/toy_kind.py, written into the table) ------
KIND = Recipe(
    "docs/adding-a-workload-kind.md", None,
    (
        Edit("exporter/catalogue/workloads.py",
             "KINDS: tuple[WorkloadKind, ...] = (KUBERNETES, CONTAINERS, SLURM)\n", '''\
def pbs_path(components: Sequence[str]) -> dict[str, str] | None:
    """A PBS job from ``.../pbs_jobs.service/jobid/<job id>`` (v1) or ``.../jobs/<job id>``."""
    for position in range(len(components) - 2):
        if components[position] == "pbs_jobs.service" and components[position + 1] in (
                "jobid", "jobs"):
            return {"pbs_job": components[position + 2]}
    return None


PBS = WorkloadKind(
    "pbs",
    "Add the pbs_job label to per-process series (the PBS job id from the process's cgroup).",
    labels=("pbs_job",),
    match=pbs_path,
    group_by=("pbs_job",),
)

#: Every workload kind, in exposition order.
KINDS: tuple[WorkloadKind, ...] = (KUBERNETES, CONTAINERS, SLURM, PBS)
''', replace=True),
        Edit("tests/fixtures/cgroup_layouts.py", "    # --- host processes ---", '''\
    # --- PBS jobs -----------------------------------------------------------------------------
    ("pbs-v1", "12:memory:/pbs_jobs.service/jobid/1234.pbs-server\\n0::/\\n",
     CgroupIdentity("pbs", {"pbs_job": "1234.pbs-server"})),
    ("pbs-v2", "0::/system.slice/pbs_jobs.service/jobs/99.server\\n",
     CgroupIdentity("pbs", {"pbs_job": "99.server"})),
'''),
    ),
    (("docs/flags.md", "| `--[no-]pbs` |"),
     ("dashboards/rules/gpu-exporter-recording.yaml",
      "record: pbs_job:gpu_workload_memory_used_bytes:sum"),
     ("dashboards/grafana/gpu-workloads.json", '"name": "pbs_job"')),
    ("tests/attribution/test_workload_kinds.py", "tests/attribution/test_cgroup.py",
     "tests/attribution/test_flags.py", "tests/dashboards/test_dashboard_json.py"),
)

RECIPES = {"metric": METRIC, "panel": PANEL, "alert": ALERT, "workload kind": KIND}


def stated(recipe: Recipe) -> tuple[int, str]:
    """The number of hand-edited files the recipe's doc states, and the text stating it."""
    text = (ROOT / recipe.doc).read_text(encoding="utf-8")
    if recipe.section is not None:
        text = text.split(f"## {recipe.section}\n", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"\*\*Edited by hand: (\d+) files?\*\*", text)
    assert len(found) == 1, f"{recipe.doc}: state '**Edited by hand: N files**' once"
    return int(found[0]), text


def scratch_copy(target: Path) -> Path:
    """The tracked files of ``COPIED``, copied under ``target``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--", *COPIED], cwd=ROOT,
                            capture_output=True, check=True, timeout=60).stdout
    for name in listed.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)
    return target


def apply(root: Path, edit: Edit) -> None:
    path = root / edit.path
    text = path.read_text(encoding="utf-8")
    if not edit.anchor:  # the end of the file
        path.write_text(text + edit.text, encoding="utf-8")
        return
    assert text.count(edit.anchor) == 1, f"{edit.path}: the anchor is not unique: {edit.anchor}"
    new = edit.text if edit.replace else edit.text + edit.anchor
    path.write_text(text.replace(edit.anchor, new), encoding="utf-8")


def run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=root, capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.mark.slow  # starts the generator and pytest in the copy
@pytest.mark.parametrize("name", RECIPES)
def test_the_recipe_edits_the_files_its_doc_states(name: str, tmp_path: Path) -> None:
    recipe = RECIPES[name]
    count, text = stated(recipe)
    root = scratch_copy(tmp_path)
    for edit in recipe.edits:
        apply(root, edit)
    edited = {edit.path for edit in recipe.edits}
    assert len(edited) <= count, f"{recipe.doc} states {count} files; the recipe edits {edited}"
    for path in edited:
        assert f"`{path}`" in text, f"{recipe.doc} does not name {path}"
    done = run(root, "-m", "dashboards.generate")
    assert done.returncode == 0, done.stderr
    for path, shown in recipe.shows:
        assert shown in (root / path).read_text(encoding="utf-8"), f"{path}: no {shown!r}"
    checks = run(root, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "not slow",
                 *recipe.checks)
    assert checks.returncode == 0, checks.stdout[-4000:] + checks.stderr[-2000:]


def test_the_stated_counts_meet_the_targets() -> None:
    """A metric in 1-2 files, a panel in 1, an alert with its test in 2, a kind in 2."""
    targets = {"metric": 2, "panel": 1, "alert": 2, "workload kind": 2}
    assert {name: stated(recipe)[0] for name, recipe in RECIPES.items()} == targets
