"""A run's end reaches the worker processes that outlive its query (Spark Connect: the
server's Python processes stay): its idle workers stop, a worker in use stops once its
task lets go of it, and another run's workers are left alone. No Spark needed."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import pytest

from etlstage.spark.tasks.ownership import retire, retired_marker
from etlstage.spark.tasks.pool import Registry
from tests.support.waiting import wait_for


class FakeWorker:
    """What the registry needs of a worker: a lock held while a task uses it, and stop().
    ``looked_at`` counts the watcher's passes over it (each reads its ``ownership``)."""

    def __init__(self) -> None:
        self.in_use = threading.Lock()
        self.stopped = threading.Event()
        self.looked_at = 0

    @property
    def ownership(self) -> None:
        self.looked_at += 1
        return None

    def stop(self, grace: float) -> None:
        self.stopped.set()


def passes(*workers: FakeWorker, n: int = 2) -> None:
    """Until the watcher has looked at each of ``workers`` ``n`` more times: whatever it was
    to do with them on seeing the state so far, it has done."""
    start = [w.looked_at for w in workers]
    wait_for(lambda: all(w.looked_at >= s + n for w, s in zip(workers, start, strict=True)), 10, "the watcher")


def test_a_retired_run_stops_its_idle_workers_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    # its SIGTERM handler is for Spark's Python processes, not for the test runner
    monkeypatch.setattr(Registry, "_install_handlers", lambda self: None)
    registry = Registry()
    idle, busy, other = FakeWorker(), FakeWorker(), FakeWorker()
    busy.in_use.acquire()  # a task of the run is still using it
    registry.put(("run-a", "upper", 0), idle)
    registry.put(("run-a", "upper", 1), busy)
    registry.put(("run-b", "upper", 0), other)
    passes(idle, busy, other)
    assert not (idle.stopped.is_set() or busy.stopped.is_set() or other.stopped.is_set())

    retire("run-a")
    assert retired_marker("run-a").is_file() and retired_marker("run-a").is_relative_to(tmp_path)
    assert idle.stopped.wait(5)
    passes(busy, other)
    assert not busy.stopped.is_set()  # never under a task's feet
    busy.in_use.release()
    assert busy.stopped.wait(5)
    assert registry.get(("run-a", "upper", 0)) is None and registry.get(("run-a", "upper", 1)) is None
    passes(other)
    assert not other.stopped.is_set() and registry.get(("run-b", "upper", 0)) is other
