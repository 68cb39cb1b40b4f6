"""Spark stops one of its Python processes (SIGTERM) while a task's worker waits out its
restart back-off: the worker is not started again, and the process's other workers get
their stdin closed and the time to finish, as the supervisor stops a pipeline (no JVM:
the task runs in a plain Python process with the pool's signal handlers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.paths import ROOT

# A Python process of Spark's, reduced to the pool and two tasks: an idle worker that has
# answered one message, then a T-stage whose worker exits before answering (its restart
# back-off is argv[4] seconds).
TASKS = r"""
import logging, sys
from etlstage.config.model import RestartPolicy, StageConfig, Timeouts
from etlstage.protocol.markers import Markers
from etlstage.protocol.vocabulary import Mode, StageType
from etlstage.kit.transport import worker_env
from etlstage.spark.tasks.conversation import StageWorker
from etlstage.spark.tasks.pool import REGISTRY

logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")
tmp, echo, crash, backoff = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])

def task_worker(name, code):
    stage = StageConfig(name, StageType.T, [sys.executable, "-c", code], Mode.BATCH, Markers(), batch_size=1,
                        timeouts=Timeouts(startup=30, request=30),
                        restart=RestartPolicy(max_restarts=3, backoff=backoff, backoff_max=backoff))
    scenario = stage.scenario(0, tmp)
    worker = StageWorker(stage, scenario, worker_env(stage, scenario), None, name)
    REGISTRY.put(("run", name, 0), worker)
    return worker

assert b"".join(task_worker("idle", echo).transform(iter([b"a\n"]))) == b"A\n"
print("idle worker answered", file=sys.stderr, flush=True)
list(task_worker("t", crash).transform(iter([b"m\n"])))
print("the failing task went on", file=sys.stderr, flush=True)
"""

# answers each message upper-cased; on end of input, notes it and exits 0
ECHO = (
    "import os, sys\n"
    "for line in sys.stdin.buffer:\n"
    "    os.write(1, line.upper() + bytes([0]))\n"
    "open({done!r}, 'w').write('end of input')\n"
)
# notes its start, then exits 9 on its first request
CRASH = "\n".join(
    [
        "import os, sys",
        "open({starts!r}, 'a').write(f'{{os.getpid()}}\\n')",
        "sys.stdin.buffer.readline()",
        "sys.exit(9)",
    ]
)


def test_a_stop_during_a_restart_back_off_starts_no_worker_and_lets_the_others_finish(tmp_path: Path) -> None:
    starts, done = tmp_path / "starts", tmp_path / "idle-done"
    backoff = 3.0
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            TASKS,
            str(tmp_path),
            ECHO.format(done=str(done)),
            CRASH.format(starts=str(starts)),
            str(backoff),
        ],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:  # until the failing worker's restart is announced
            lines.append(line)
            if "restart" in line:
                break
        else:
            raise AssertionError("".join(lines))
        assert starts.read_text().count("\n") == 1
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=backoff + 10)
        took = time.monotonic() - stopped
        rest = proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
    assert code == 0, rest
    assert took < backoff - 1, f"the stop waited out the back-off ({took:.1f} s)"
    assert "the failing task went on" not in rest
    assert starts.read_text().count("\n") == 1, "a worker was started after the stop"
    assert done.read_text() == "end of input"  # the idle worker saw its stdin close and finished
