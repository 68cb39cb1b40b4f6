"""A Spark task's worker that exits while a child holds its stdout: the exit ends its
output after a short drain (etlstage/kit/exits.py), what it wrote first is read, and the
child goes with its process group (without a JVM: the worker process alone)."""

from __future__ import annotations

import collections
import time
from pathlib import Path

import psutil
import pytest

from etlstage.errors import WorkerTimeout
from etlstage.kit.exits import EXIT_DRAIN
from etlstage.spark.tasks.process import WorkerProcess
from tests.support.waiting import wait_for


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_the_exit_ends_the_output_though_a_child_holds_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    script = f"printf 'last words'; sleep 300 & echo $! > {pid_file}; exit 1"
    worker = WorkerProcess(["sh", "-c", script], {"PATH": "/usr/bin:/bin"}, None, "t")
    started = time.monotonic()
    out = b""
    try:
        while not worker.eof:
            for chunk in worker.pump(collections.deque(), started + 60, "request time limit"):
                out += chunk
        took = time.monotonic() - started
    except WorkerTimeout:
        pytest.fail("the worker's exit was not noticed before the request time limit")
    finally:
        worker.kill()
    assert out == b"last words"  # what it wrote before it exited was read
    assert took < EXIT_DRAIN + 5
    child = int(pid_file.read_text())
    wait_for(lambda: gone(child), 10, f"the worker's child {child} to be gone")
