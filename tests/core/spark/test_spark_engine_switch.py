"""One state for both engines: a run on one engine goes on where a run on the other stopped.

Each pipeline counts: its extractor answers window ``[start, end)`` (supervisor-managed
offsets) or the next ten numbers after its own offset file (worker-managed), up to a
limit the test raises between runs; the sink appends what it gets, so a number there
twice was extracted twice and a number missing was skipped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import PY, TW
from tests.support.run_cli import ETLSTAGE, etlstage

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
SLOW = 0.1  # seconds per message in a run that is stopped or killed part-way

SUPERVISOR_OFFSETS = """
max_inflight_windows: 2
stages:
  - {{name: numbers, type: E, mode: cyclic, offsets: supervisor, offset_policy: {{type: counter, start: 0, step: 50}},
     command: [{PY}, {TW}, count, "{n}"]}}
  - {{name: slow, type: T, command: [{PY}, {TW}, slow, "{delay}"]}}
  - {{name: sink, type: L, command: [{PY}, {TW}, append, out.txt]}}
"""
WORKER_OFFSETS = """
stages:
  - {{name: numbers, type: E, mode: cyclic, offsets: worker, command: [{PY}, {TW}, count, "{n}", "10"]}}
  - {{name: sink, type: L, command: [{PY}, {TW}, append, out.txt]}}
"""


def write(tmp: Path, stages: str, n: int, delay: float = 0) -> None:
    """``delay``: seconds the T-stage takes per message, so a stop lands while a run is under
    way; the runs that only finish the work go at full speed."""
    (tmp / "stages.yaml").write_text(stages.format(PY=PY, TW=TW, n=n, delay=delay))


def run(tmp: Path, engine: str) -> str:
    args = ["--engine", "spark", "--master", "local[2]"] if engine == "spark" else []
    r = etlstage(tmp, "run", *args, "--once", "--no-progress", "stages.yaml", timeout=300)
    assert r.code == 0, r.stderr[-3000:]
    return r.stderr


def delivered(tmp: Path) -> Counter[int]:
    path = tmp / "out.txt"
    return Counter(int(x) for x in path.read_text().split()) if path.exists() else Counter()


def start(tmp: Path, *flags: str) -> subprocess.Popen[bytes]:
    """A run without --once (it would go on for ever), its workers in its process group."""
    return subprocess.Popen(
        [*ETLSTAGE, "run", *flags, "--no-progress", "stages.yaml"],
        cwd=tmp,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def wait_delivered(tmp: Path, proc: subprocess.Popen[bytes], at_least: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while sum(delivered(tmp).values()) < at_least:
        assert proc.poll() is None and time.monotonic() < deadline, "the first run loaded too little"
        time.sleep(0.05)


def test_worker_offsets_supervisor_then_spark_then_supervisor_each_number_once(tmp_path: Path) -> None:
    """The worker keeps its offset in ETLSTAGE_STATE_DIR: the same folder on both engines."""
    write(tmp_path, WORKER_OFFSETS, 30)
    run(tmp_path, "supervisor")
    assert delivered(tmp_path) == Counter(range(30))

    write(tmp_path, WORKER_OFFSETS, 60)  # more to read: the next run goes on from 30
    err = run(tmp_path, "spark")
    assert delivered(tmp_path) == Counter(range(60)), err[-3000:]
    # status and dead letters read the state whichever engine ran last (the file says supervisor)
    status = etlstage(tmp_path, "status", "stages.yaml")
    assert status.code == 0, status.stderr
    assert "engine: spark" in status.stdout and "micro-batches committed" in status.stdout, status.stdout
    assert etlstage(tmp_path, "deadletter", "list", "stages.yaml").stdout.strip() == "no dead letters"

    write(tmp_path, WORKER_OFFSETS, 90)
    run(tmp_path, "supervisor")
    assert delivered(tmp_path) == Counter(range(90))


def test_supervisor_offsets_supervisor_then_spark_then_supervisor_each_number_once(tmp_path: Path) -> None:
    """Committed ends in the pipeline's state: Spark starts from the supervisor's and writes its own back."""
    write(tmp_path, SUPERVISOR_OFFSETS, 300, delay=SLOW)
    first = start(tmp_path)
    try:
        wait_delivered(tmp_path, first, 50)
        first.send_signal(signal.SIGTERM)  # a graceful stop: what is in flight is finished and committed
        assert first.wait(timeout=60) == 0
    finally:
        _kill_group(first)
    before = delivered(tmp_path)
    assert before == Counter(range(len(before))) and 50 <= len(before) < 300

    write(tmp_path, SUPERVISOR_OFFSETS, 300)
    err = run(tmp_path, "spark")
    assert delivered(tmp_path) == Counter(range(300)), err[-3000:]

    err = run(tmp_path, "supervisor")  # Spark's commits are the pipeline's: nothing is left
    assert "extracted 0 messages" in err, err
    assert delivered(tmp_path) == Counter(range(300))


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def test_a_sigkilled_supervisor_run_then_spark_skips_nothing(tmp_path: Path) -> None:
    """What the killed run left uncommitted is extracted again, nothing more (at most the windows in flight)."""
    write(tmp_path, SUPERVISOR_OFFSETS, 400, delay=SLOW)
    first = start(tmp_path)
    try:
        wait_delivered(tmp_path, first, 150)
    finally:
        _kill_group(first)
    before = sum(delivered(tmp_path).values())
    assert 150 <= before < 400

    write(tmp_path, SUPERVISOR_OFFSETS, 400)
    run(tmp_path, "spark")
    after = delivered(tmp_path)
    assert set(after) == set(range(400))  # nothing skipped
    again = sum(after.values()) - 400
    # the two windows in flight at the kill are extracted again (the sink's dedupe is what drops them);
    # starting over would load the 150 numbers before them again
    assert again <= 2 * 50, f"{again} numbers loaded twice: more than the windows in flight at the kill"


def test_spark_after_the_supervisor_starts_from_the_pipelines_state_not_its_older_checkpoint(tmp_path: Path) -> None:
    """Spark, then the supervisor, then Spark: the second Spark run does not go back to where its
    own checkpoint stopped (what the supervisor extracted since would be extracted again)."""
    write(tmp_path, SUPERVISOR_OFFSETS, 400, delay=SLOW)
    for flags, at_least in ((("--engine", "spark", "--master", "local[2]"), 100), ((), 250)):
        proc = start(tmp_path, *flags)
        try:
            wait_delivered(tmp_path, proc, at_least, timeout=240)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=120) == 0
        finally:
            _kill_group(proc)
    before = sum(delivered(tmp_path).values())
    assert 250 <= before < 400

    write(tmp_path, SUPERVISOR_OFFSETS, 400)
    err = run(tmp_path, "spark")
    after = delivered(tmp_path)
    assert set(after) == set(range(400)), err[-3000:]
    # at most the micro-batch in flight when the first Spark run was stopped reached the sink twice
    assert sum(after.values()) - 400 <= 50, sorted(n for n, k in after.items() if k > 1)
    assert "the Spark checkpoint" in err and "was removed" in err, err[-3000:]
