"""The report tests' shared week on a real Prometheus (tests/report/week.py): backfilled once
per session, for every module that asks for it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.report.week import Week, build_week


@pytest.fixture(scope="session")
def week(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Week]:
    yield from build_week(tmp_path_factory)
