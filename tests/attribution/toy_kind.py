"""A workload kind added the way ``docs/adding-a-workload-kind.md`` says: one row and one parser.

The kind is PBS Professional / OpenPBS jobs: PBS's cgroup hook puts a job's processes under
``pbs_jobs.service/jobid/<job id>`` (cgroup v1) or ``pbs_jobs.service/jobs/<job id>`` (v2).
``install()`` appends the row to ``exporter.catalogue.workloads.KINDS``, as writing it into
that table would; it must run before anything else of the exporter is imported (the flags,
the metric rows and the dashboards read the table when they are built).
``tests/test_recipes.py`` adds the same kind by editing a copy of the repository instead.

``python -m tests.attribution.toy_kind ARGS``: the real CLI with the row installed and
``pynvml`` replaced by the fake (one H200 whose one process is ``PID``; give ``--procfs`` a
fake /proc holding it). ``python -m tests.attribution.toy_kind outputs SCENARIO``: what the
generator and the simulator derive from the row, as JSON (see ``outputs``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from exporter.catalogue import workloads
from exporter.catalogue.workloads import WorkloadKind

#: The fake GPU's process (the test writes its /proc entry).
PID = 4242


# --- the parser --------------------------------------------------------------------------------
def pbs_path(components: Sequence[str]) -> dict[str, str] | None:
    """A PBS job from ``.../pbs_jobs.service/jobid/<job id>`` (v1) or ``.../jobs/<job id>``."""
    for position in range(len(components) - 2):
        if components[position] == "pbs_jobs.service" and components[position + 1] in (
                "jobid", "jobs"):
            return {"pbs_job": components[position + 2]}
    return None


# --- the row -----------------------------------------------------------------------------------
PBS = WorkloadKind(
    "pbs",
    "Add the pbs_job label to per-process series (the PBS job id from the process's cgroup).",
    labels=("pbs_job",),
    match=pbs_path,
    group_by=("pbs_job",),
)


def install() -> None:
    """Add ``PBS`` to the table (before the exporter's other modules are imported)."""
    assert "exporter.config" not in sys.modules, "install() after the flags were built"
    workloads.KINDS = (*workloads.KINDS, PBS)


def outputs(scenario: str) -> dict[str, object]:
    """What follows from the row: flags, catalogue labels, rules, dashboard variables, and the
    simulated ``scenario``'s /metrics text with ``--pbs``."""
    from dashboards import accounting, recording, variables  # noqa: PLC0415 (after install)
    from exporter.attribution.accounting import IdleAccounting  # noqa: PLC0415
    from exporter.catalogue import metrics  # noqa: PLC0415
    from exporter.cli import parse_config  # noqa: PLC0415
    from exporter.config import flags_markdown_table  # noqa: PLC0415
    from exporter.exposition import snapshot_families  # noqa: PLC0415
    from exporter.exposition.encode import Encoder  # noqa: PLC0415
    from exporter.sources.simulated.scenario import load_scenario  # noqa: PLC0415
    from exporter.sources.simulated.source import SimulatedSource  # noqa: PLC0415

    config = parse_config(["--source", "simulated", "--scenario", scenario, "--pbs"], {})
    now = [1_000.0]
    source = SimulatedSource(load_scenario(scenario), clock=lambda: now[0])
    counters = IdleAccounting(config.workload_labels)
    counters.enrich(source.collect(config.collect_groups()))
    now[0] += 10.0
    snapshot = counters.enrich(source.collect(config.collect_groups()))
    text = Encoder("text/plain; version=0.0.4").encode(
        snapshot_families(snapshot, config.exposition_options()))
    workload_rules = recording.workload_group().rules
    return {
        "flag_table": flags_markdown_table(),
        "kinds": [kind.name for kind in config.workload_labels.kinds],
        "workload_labels": list(metrics.WORKLOAD_MEMORY.labels),
        "accounting_labels": list(metrics.ACCOUNTING_ROWS[0].labels),
        "records": {rule.record: rule.expr for rule in workload_rules},
        "accounting_exprs": [rule.expr for rule in accounting.all_records()],
        "variables": [variable.build().name for variable in variables.workload_labels()],
        "metrics": text,
    }


def main(argv: list[str]) -> int:
    install()
    if argv[:1] == ["outputs"]:
        print(json.dumps(outputs(argv[1])))
        return 0
    from tests.sources.fake_nvml import FakeNvml, FakeProcess, h200  # noqa: PLC0415

    fake = FakeNvml([h200(0, memory_used=7 << 30)])
    fake.gpus[0].compute = [FakeProcess(pid=PID, used_memory=6 << 30)]
    sys.modules["pynvml"] = fake
    from exporter.cli import main as cli_main  # noqa: PLC0415 (after the fake is in place)

    return cli_main(argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
