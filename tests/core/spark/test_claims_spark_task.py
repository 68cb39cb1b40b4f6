"""A Spark load task's conversation returns only once its worker acknowledged every batch
(its EOPs): Spark commits the micro-batch when the task returns, so a return before the last
EOP commits input the worker has not loaded. Deterministic, in-process: no JVM. The worker
is quick but for the last batch, so no settle time covers a return before its EOP."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from etlstage.config.loader import parse_config
from etlstage.errors import PipelineError
from etlstage.kit.transport import worker_env
from etlstage.spark.tasks.conversation import StageWorker
from tests.support.paths import FIXTURES

SLOW_LOAD = str(FIXTURES / "slow_load.py")
TW = str(FIXTURES / "tw.py")


def _loader(tmp_path: Path, out: Path, mode: str) -> StageWorker:
    text = f"""
state_dir: {tmp_path / "state"}
stages:
  - {{name: e, type: E, command: ["{sys.executable}", "-c", "pass"]}}
  - {{name: sink, type: L, {mode}, command: ["{sys.executable}", "{SLOW_LOAD}", "{out}", "0.5", "20"]}}
"""
    stage = parse_config(text, base_dir=str(tmp_path)).stages[1]
    scenario = stage.scenario(0, str(tmp_path))
    return StageWorker(stage, scenario, worker_env(stage, scenario), str(tmp_path), "sink")


def _check_task_returns_after_every_eop(tmp_path: Path, mode: str) -> None:
    out = tmp_path / "loaded.txt"
    w = _loader(tmp_path, out, mode)
    blocks = [b"".join(b"%d\n" % i for i in range(k, k + 7)) for k in range(0, 21, 7)]
    try:
        assert list(w.transform(blocks)) == []  # an L-stage yields nothing: its EOPs acknowledge
        # the task has returned: every message must be loaded now, before the worker stops
        assert sorted(out.read_text().splitlines(), key=int) == [str(i) for i in range(21)]
    finally:
        w.stop(5)


def test_a_load_task_returns_only_after_its_workers_eops_batches(tmp_path: Path) -> None:
    _check_task_returns_after_every_eop(tmp_path, "mode: batch, batch_size: 5")


def test_a_load_task_returns_only_after_its_workers_eops_single(tmp_path: Path) -> None:
    _check_task_returns_after_every_eop(tmp_path, "mode: single")


def test_a_load_task_returns_only_after_its_workers_eops_worker_driven(tmp_path: Path) -> None:
    _check_task_returns_after_every_eop(tmp_path, "mode: batch, batch_size: 4, batch_driver: worker")


def test_on_failure_fail_stops_the_task_naming_the_batch(tmp_path: Path) -> None:
    """A batch that fails max_restarts + 1 times with on_failure: fail stops the task with
    the stage, the batch and the last error (the query then commits nothing past it)."""
    text = f"""
state_dir: {tmp_path / "state"}
stages:
  - {{name: e, type: E, command: ["{sys.executable}", "-c", "pass"]}}
  - {{name: picky, type: T, mode: batch, batch_size: 3, on_failure: fail, restart: {{max_restarts: 1, backoff: 0}},
     command: ["{sys.executable}", "{TW}", poison, "4"]}}
  - {{name: sink, type: L, command: ["{sys.executable}", "-c", "pass"]}}
"""
    stage = parse_config(text, base_dir=str(tmp_path)).stages[1]
    scenario = stage.scenario(0, str(tmp_path))
    w = StageWorker(stage, scenario, worker_env(stage, scenario), str(tmp_path), "picky")
    try:
        with pytest.raises(
            PipelineError, match=r"stage 'picky': a batch of 3 message\(s\) failed 2 times; on_failure=fail"
        ):
            list(w.transform([b"".join(b"%d\n" % i for i in range(9))]))
    finally:
        w.kill()
