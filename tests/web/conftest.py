"""Fixtures shared by the web tests: one test CA per module."""

from __future__ import annotations

import pytest

from tests.web.tlsfiles import Authority


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return Authority(tmp_path_factory.mktemp("pki"))
