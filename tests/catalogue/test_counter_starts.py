"""Every counter row says where its zero lies (its OpenMetrics ``_created``); nothing else does."""

from __future__ import annotations

import pytest

from exporter.catalogue import metrics
from exporter.catalogue.metrics import Kind, Metric, Since


@pytest.mark.parametrize("row", metrics.CATALOGUE, ids=lambda row: row.name)
def test_counters_and_only_counters_say_since_when(row: Metric) -> None:
    assert (row.since is not None) == (row.kind is Kind.COUNTER), row.name


def test_lifetime_counters_are_the_infoROMs() -> None:
    lifetime = {row.name for row in metrics.CATALOGUE if row.since is Since.LIFETIME}
    assert lifetime == {metrics.REMAPPED_ROWS.name, metrics.RETIRED_PAGES.name,
                        metrics.ECC_AGGREGATE.name}
