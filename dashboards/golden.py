"""Golden exposition outputs: what ``/metrics`` serves for each scenario preset, as text.

One file per preset under ``tests/golden/`` (node_exporter's ``e2e-output.txt`` idea): the
per-GPU and per-process part of the body at a fixed simulated moment with every group on, in
text format 0.0.4; for the presets whose counters start at different times (``OPENMETRICS``:
accounting per pod, DRA claims, XIDs, PyTorch counters) the OpenMetrics body as well
(``<preset>.om``: HELP/TYPE/UNIT as OpenMetrics writes them, and each counter's ``_created``).
Written by ``python -m dashboards.generate``; ``tests/exposition/test_golden.py`` compares, so
any change to names, labels, values, order or escaping shows up as one reviewable diff. (The
exporter's own ``gpu_exporter_*`` families are left out: they hold the Python and library
versions of the machine that renders them.)
"""

from __future__ import annotations

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as CONTENT_TYPE_OM

from exporter.attribution.accounting import IdleAccounting
from exporter.attribution.torchtotals import TorchUserTotals
from exporter.attribution.workloads import WorkloadLabels
from exporter.catalogue.metrics import SWITCHABLE_GROUPS, Group
from exporter.catalogue.workloads import KUBERNETES, SLURM
from exporter.exposition.collector import snapshot_families
from exporter.exposition.encode import Encoder
from exporter.sources.simulated.scenario import list_presets, load_scenario
from exporter.sources.simulated.source import SimulatedSource
from exporter.state import ExpositionOptions

#: Where the golden files live, relative to the repository root.
GOLDEN_DIR = "tests/golden"
#: The simulated moment of the golden bodies: ten minutes into each scenario.
START, SECONDS = 1_700_000_000.0, 600.0
COLLECTION_INTERVAL = 60.0
#: The workload labels each preset's exporter runs with (as the chart would run it).
WORKLOADS = {
    "kubernetes-node": WorkloadLabels((KUBERNETES,)),
    "dra-node": WorkloadLabels((KUBERNETES,), frozenset({"pod_uid"})),
    "slurm-node": WorkloadLabels((SLURM,)),
}
#: Presets with an OpenMetrics golden file too.
OPENMETRICS = ("dra-node", "kubernetes-node", "torch-memory-pressure", "xid-storm")


def golden_body(preset: str, openmetrics: bool = False) -> str:
    """The snapshot part of ``/metrics`` for ``preset`` at ``SECONDS`` (every group on), as
    text 0.0.4 or (without the closing ``# EOF``) OpenMetrics."""
    clock = [START]
    source = SimulatedSource(load_scenario(preset), clock=lambda: clock[0])
    source.start()
    groups = frozenset(SWITCHABLE_GROUPS)
    workloads = WORKLOADS.get(preset, WorkloadLabels())
    # As the CLI chains them: the per-user counters count from the first collection; idle
    # accounting integrates every collection (one a minute here) since the first.
    totals, accounting = TorchUserTotals(), IdleAccounting(workloads)
    snapshot = accounting.enrich(totals.enrich(source.collect(groups)))
    while clock[0] < START + SECONDS:
        clock[0] += COLLECTION_INTERVAL
        snapshot = accounting.enrich(totals.enrich(source.collect(groups)))
    options = ExpositionOptions(groups=frozenset(Group), workload_labels=workloads)
    encoder = Encoder(CONTENT_TYPE_OM if openmetrics else CONTENT_TYPE_PLAIN_0_0_4)
    return encoder.encode(snapshot_families(snapshot, options))


def golden_files() -> dict[str, str]:
    """Path relative to the repository root -> content: one text file per preset, and the
    OpenMetrics files."""
    files = {f"{GOLDEN_DIR}/{preset}.prom": golden_body(preset) for preset in list_presets()}
    files.update((f"{GOLDEN_DIR}/{preset}.om", golden_body(preset, openmetrics=True))
                 for preset in OPENMETRICS)
    return files
