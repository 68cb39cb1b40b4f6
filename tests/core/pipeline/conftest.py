"""The ``engine`` fixture: each test of this folder that takes it runs on both engines
(the Spark one marked slow: tests/support/engines.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.engines import ENGINES, Engine


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Engine:
    return Engine(request.param, request, tmp_path)
