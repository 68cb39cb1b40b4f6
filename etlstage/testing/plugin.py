"""pytest plugin (entry point ``pytest11``): the ``stage_harness`` and ``pipeline_test`` fixtures."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import pytest

from etlstage.testing.harness import StageHarness
from etlstage.testing.pipeline import CaseResult, check_cases


@pytest.fixture
def stage_harness(tmp_path) -> StageHarness:
    """Drive one worker through any protocol scenario from memory; see etlstage.testing."""
    return StageHarness(str(tmp_path))


@pytest.fixture
def pipeline_test(tmp_path: Path) -> Callable[..., list[CaseResult]]:
    """Run a pipeline test file's cases (all, or the one named) in ``tmp_path``; fail on the
    first that fails (:func:`etlstage.testing.pipeline.check_cases`)."""
    return functools.partial(check_cases, workdir=tmp_path)
