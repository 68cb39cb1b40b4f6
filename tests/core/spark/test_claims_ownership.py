"""After an owner's death, the new owner of a keyed partition waits for the old owner's
worker, still running, to be gone: never two live workers for one partition on a host.

A real OS process plays the first owner: it takes (run, "keyed", 0), starts a worker that
does not end when its stdin closes (``sleep``: one busy with a batch) and records it in the
lock file, as a Spark task does, then is SIGKILLed. Its watchdog ends the worker a grace
time later; the second owner's ``acquire`` must not return before that.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid

import psutil
import pytest

from etlstage.spark.tasks.ownership import Ownership

pytestmark = pytest.mark.timeout(60)

GRACE = 1.5  # seconds between the owner's death and its watchdog killing the worker

OWNER = textwrap.dedent(
    f"""
    import sys, time
    import etlstage.spark.tasks.process as process
    from etlstage.spark.tasks.ownership import Ownership

    process.WATCHDOG_GRACE = {GRACE}
    ownership = Ownership(sys.argv[1], "keyed", 0)
    ownership.acquire(10, "keyed")
    worker = process.WorkerProcess(["sleep", "600"], {{"PATH": "/usr/bin:/bin"}}, None, "keyed")
    ownership.record(worker.pid)
    print(worker.pid, flush=True)
    time.sleep(600)
    """
)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_the_new_owner_waits_for_a_dead_owners_worker() -> None:
    run_id = f"test-{uuid.uuid4().hex}"
    first = subprocess.Popen([sys.executable, "-c", OWNER, run_id], stdout=subprocess.PIPE, text=True)
    assert first.stdout is not None
    pid = int(first.stdout.readline())
    try:
        assert _alive(pid)
        first.send_signal(signal.SIGKILL)  # the owner dies; its worker lives on for the grace time
        first.wait(5)
        assert _alive(pid)
        second = Ownership(run_id, "keyed", 0)
        at_return: list[bool] = []
        taker = threading.Thread(target=lambda: (second.acquire(30, "keyed"), at_return.append(_alive(pid))))
        taker.start()
        taker.join(30)
        assert at_return == [False]  # acquired only once the old worker had gone
        assert second.handed is None  # a dead owner hands nothing over
        second.release()
    finally:
        first.kill()
        first.wait(5)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
