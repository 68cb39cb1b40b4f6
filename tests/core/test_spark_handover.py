"""A keyed stage's worker moves between Spark Python processes running, not restarted.

Two real OS processes play two of Spark's Python processes on one host: the holder owns
(run, stage, partition) and runs the worker (``cat``); the test process asks for the
partition, receives the worker's pipes and talks to the same process.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator

import psutil
import pytest

from etlstage.spark.ownership import Ownership
from etlstage.spark.process import WorkerProcess

pytestmark = pytest.mark.timeout(60)

HOLDER = textwrap.dedent(
    """
    import sys, time
    import etlstage.spark.process as process
    from etlstage.spark.ownership import Ownership

    process.WATCHDOG_GRACE = 0.3  # this process's watchdog would kill its workers 0.3 s after it dies
    run_id, mode = sys.argv[1], sys.argv[2]
    ownership = Ownership(run_id, "keyed", 0)
    ownership.acquire(10, "keyed")
    worker = process.WorkerProcess(["cat"], {"PATH": "/usr/bin:/bin"}, None, "keyed")
    print(worker.pid, flush=True)
    while not ownership.asked:
        time.sleep(0.01)
    if mode == "hand over":
        print("handed" if worker.hand_over(ownership.address) else "kept", flush=True)
    else:
        worker.stop(5.0)
        print("stopped", flush=True)
    ownership.release()
    time.sleep(60)
    """
)


@contextlib.contextmanager
def holder(mode: str) -> Iterator[tuple[Ownership, subprocess.Popen[str], int]]:
    """A first owner running ``cat`` for (run, "keyed", 0); ours, the second Ownership, asks
    for the partition (not yet acquired). Everything is killed at the end."""
    run_id = f"test-{uuid.uuid4().hex}"
    first = subprocess.Popen(
        [sys.executable, "-c", HOLDER, run_id, mode], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert first.stdout is not None
    pid = int(first.stdout.readline())
    try:
        yield Ownership(run_id, "keyed", 0), first, pid
    finally:
        first.kill()
        first.wait(5)
        if psutil.pid_exists(pid):
            os.kill(pid, signal.SIGKILL)


def said(first: subprocess.Popen[str]) -> str:
    assert first.stdout is not None
    return first.stdout.readline().strip()


def echo(worker: WorkerProcess, data: bytes) -> bytes:
    pending = collections.deque([memoryview(data)])
    got = b""
    deadline = time.monotonic() + 10
    while len(got) < len(data):
        got += b"".join(worker.pump(pending, deadline, "echo"))
    return got


def test_the_running_worker_is_handed_over_and_outlives_its_first_owner() -> None:
    with holder("hand over") as (ownership, first, pid):
        ownership.acquire(10, "keyed")
        assert said(first) == "handed"
        assert ownership.handed is not None and ownership.handed.pid == pid
        worker = WorkerProcess(["cat"], {}, None, "keyed", ownership.handed)
        assert worker.pid == pid  # the same process: no restart
        assert echo(worker, b"one\n") == b"one\n"
        # the first owner dies: its watchdog must not take the worker with it
        (watchdog,) = [
            p for p in psutil.Process(first.pid).children() if "etlstage.spark.watchdog" in " ".join(p.cmdline())
        ]
        first.send_signal(signal.SIGKILL)
        first.wait(5)
        watchdog.wait(10)  # it has killed whatever it still watched, and exited
        assert psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        assert echo(worker, b"two\n") == b"two\n"
        assert worker.stop(5.0) is not None  # stdin closed: cat ends; its status is not ours to read
        assert worker.proc.poll() is not None
        assert "unknown" in worker.status()
        ownership.release()


def test_an_owner_that_stops_its_worker_hands_nothing_over() -> None:
    """The fallback: the worker stopped and the lock released, the new owner starts afresh."""
    with holder("stop") as (ownership, first, pid):
        ownership.acquire(10, "keyed")
        assert said(first) == "stopped"
        assert ownership.handed is None
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        ownership.release()
