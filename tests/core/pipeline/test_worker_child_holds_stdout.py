"""A worker that exits while a child it started still holds its stdout, on either engine.

The pipe stays open, so no end of file comes; the worker's exit is the failure all the
same (etlstage/kit/exits.py): the run notices within seconds, not at the request time
limit (600 s by default), the child goes with the worker's process group, and the
restarted worker loads everything.
"""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

from tests.support.engines import ENGINES, Engine
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Engine:
    return Engine(request.param, request, tmp_path)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_worker_whose_child_holds_its_stdout_fails_at_its_exit_and_leaves_no_child(engine: Engine) -> None:
    stages = """
stages:
  - {name: src, type: E, command: ["{PY}", "{TW}", count, "300"]}
  - {name: t, type: T, mode: batch, batch_size: 50, restart: {backoff: 0.05},
     command: ["{PY}", "{MISBEHAVE}", "{FLAGS}", "orphan@2"]}
  - {name: sink, type: L, mode: batch, batch_size: 100, command: ["{PY}", "{TW}", append, out.txt]}
"""
    started = time.monotonic()
    code, log = engine.run(stages)
    took = time.monotonic() - started
    assert code == 0, log[-3000:]
    assert took < 120, f"the run took {took:.0f}s: the exit was not noticed"
    assert {int(x) for x in engine.lines("out.txt")} == set(range(300)), log[-3000:]
    assert "orphan@2" in {p.name for p in (engine.tmp / "flags").iterdir()}
    assert "t failed" in log or "restart" in log, log[-3000:]
    child = int((engine.tmp / "flags" / "orphan.pid").read_text())
    wait_for(lambda: gone(child), 10, f"the worker's child {child} to be gone")
