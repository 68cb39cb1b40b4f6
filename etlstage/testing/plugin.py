"""pytest plugin (entry point ``pytest11``): the ``stage_harness`` fixture."""

from __future__ import annotations

import pytest

from etlstage.testing.harness import StageHarness


@pytest.fixture
def stage_harness(tmp_path) -> StageHarness:
    """Drive one worker through any protocol scenario from memory; see etlstage.testing."""
    return StageHarness(str(tmp_path))
