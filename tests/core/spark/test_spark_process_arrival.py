"""The Spark engine's worker pipes time what they read as the supervisor's do: output
read while the pump waited arrived then; output already there when the pump looked may
have arrived at any time since, and says so (None). The rules on confirmation
(policy.Pace) take that as doubt, on both engines."""

from __future__ import annotations

import collections
import os
import sys
import time

from etlstage.spark.tasks.process import WorkerProcess
from tests.core.kit.test_transport import TWO_BEATS


def test_the_pump_times_output_only_when_it_saw_it_arrive() -> None:
    worker = WorkerProcess([sys.executable, "-c", TWO_BEATS], dict(os.environ), None, "beats")
    pending: collections.deque[memoryview] = collections.deque([memoryview(b"start\n")])
    try:
        while pending:
            worker.pump(pending, time.monotonic() + 20, "write")
        got = b""
        while not got:  # the pump waits for its "a", written half a second after "start"
            got = b"".join(worker.pump(pending, time.monotonic() + 20, "start-up"))
        assert got == b"a" and worker.last_arrival is not None
        pending.append(memoryview(b"go\n"))
        while pending:
            worker.pump(pending, time.monotonic() + 20, "write")
        time.sleep(0.5)  # busy elsewhere: "b" and "c" arrive unseen
        read_at = time.monotonic()
        got = b"".join(worker.pump(pending, time.monotonic() + 20, "read"))
        assert got.startswith(b"b") and worker.last_arrival is None, (got, worker.last_arrival, read_at)
    finally:
        worker.kill()
