"""A worker that exits while a child it started still holds its stdout, on either engine.

The pipe stays open, so no end of file comes; the worker's exit is the failure all the
same (etlstage/kit/exits.py): the run notices within seconds, not at the request time
limit (600 s by default), the child goes with the worker's process group, and the
restarted worker loads everything.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.support.engines import Engine

pytestmark = pytest.mark.timeout(300)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class ChildWatch:
    """Watches, while the run goes on, for the worker's child to appear and then to go:
    the time between is how long the worker's exit took to be noticed (its group is
    killed then), whatever the engine's start-up takes on a loaded machine."""

    def __init__(self, pid_file: Path) -> None:
        self.pid_file = pid_file
        self.seen: float | None = None
        self.took: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        pid = None
        while True:
            stopping = self._stop.wait(0.05)  # one last look once stopped
            if pid is None:
                text = self.pid_file.read_text().strip() if self.pid_file.exists() else ""
                if text:
                    pid, self.seen = int(text), time.monotonic()
            elif gone(pid):
                assert self.seen is not None
                self.took = time.monotonic() - self.seen
                return
            if stopping:
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def test_a_worker_whose_child_holds_its_stdout_fails_at_its_exit_and_leaves_no_child(engine: Engine) -> None:
    stages = """
stages:
  - {name: src, type: E, command: ["{PY}", "{TW}", count, "300"]}
  - {name: t, type: T, mode: batch, batch_size: 50, restart: {backoff: 0.05},
     command: ["{PY}", "{MISBEHAVE}", "{FLAGS}", "orphan@2"]}
  - {name: sink, type: L, mode: batch, batch_size: 100, command: ["{PY}", "{TW}", append, out.txt]}
"""
    watch = ChildWatch(engine.tmp / "flags" / "orphan.pid")
    try:
        code, log = engine.run(stages)
    finally:
        watch.stop()
    assert code == 0, log[-3000:]
    assert {int(x) for x in engine.lines("out.txt")} == set(range(300)), log[-3000:]
    assert "orphan@2" in {p.name for p in (engine.tmp / "flags").iterdir()}
    assert watch.seen is not None, "the worker never started its child"
    # noticed in seconds: the drain (1 s) and a loaded machine's slack, not the request time limit (600 s)
    assert watch.took is not None and watch.took < 30, f"the child lived {watch.took}s after it was started"
