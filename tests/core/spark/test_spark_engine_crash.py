"""SIGKILL the Spark engine's driver at seeded random moments, or a Spark Python worker mid-batch;
restart with --once; the idempotent sink ends with exactly the expected set, and no worker
process outlives the run.  A failure names its seed."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import PY, TW
from tests.support.crash_points import POINTS, kill_at_each_point
from tests.support.paths import FIXTURES, ROOT
from tests.support.run_cli import ETLSTAGE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
N = 120
MISBEHAVE = str(FIXTURES / "misbehave.py")


def pipeline(tmp: Path, master: str) -> None:
    (tmp / "stages.yaml").write_text(
        f"""
stages:
  - {{name: src, type: E, mode: cyclic, command: [{PY}, {TW}, count, "{N}", "6"]}}
  - {{name: up, type: T, mode: batch, batch_size: 4, command: [{PY}, {TW}, fanout]}}
  - {{name: sink, type: L, command: [{PY}, {TW}, idem, {tmp / "out.txt"}]}}
engine: {{kind: spark, master: "{master}"}}
"""
    )


def expected() -> list[str]:
    out = []
    for i in range(N):
        k = i % 3
        out += [] if k == 0 else [f"{i}a", f"{i}b"] if k == 1 else [str(i)]
    return sorted(out)


def ours(tmp: Path) -> list[psutil.Process]:
    """Worker processes of this test's pipeline: tw.py running in its folder (a worker's
    working directory is the pipeline's). Not every tw.py on the machine: matched by name
    alone, another test's fanout worker was found and its Spark Python process killed (a
    shared-session test beside this one failed with "Python worker exited unexpectedly")."""
    here = tmp.resolve()
    found = []
    for p in psutil.process_iter(["cmdline", "cwd"]):
        cmd = " ".join(p.info["cmdline"] or [])
        cwd = p.info["cwd"]
        if TW in cmd and cwd and Path(cwd).is_relative_to(here):
            found.append(p)
    return found


def wait_gone(tmp: Path, timeout: float = 40) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = ours(tmp)
        if not left:
            return []
        time.sleep(0.5)
    return [" ".join(p.cmdline()) for p in ours(tmp)]


def start(tmp: Path, log) -> subprocess.Popen:
    return subprocess.Popen(
        [*ETLSTAGE, "run", "stages.yaml", "--once", "--no-progress"],
        cwd=tmp,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )


def finish(tmp: Path, log) -> None:
    proc = start(tmp, log)
    assert proc.wait(300) == 0, (tmp / "run.log").read_text()[-3000:]


def test_driver_killed_at_each_point_of_a_run(tmp_path: Path) -> None:
    """The driver and its JVM killed once in start-up, once in a micro-batch (a seeded moment
    in it) and once between two (tests/support/crash_points.py); no worker outlives a kill."""
    seed = int(os.environ.get("ETLSTAGE_CRASH_SEED", "1723"))
    pipeline(tmp_path, "local[2]")

    def no_worker_left(hit: str) -> None:
        left = wait_gone(tmp_path)
        assert not left, f"seed {seed}, a kill at {hit}: worker processes outlived the driver: {left}"

    with open(tmp_path / "run.log", "ab") as log:
        hit = kill_at_each_point(lambda: start(tmp_path, log), tmp_path / ".etlstage", seed, after_kill=no_worker_left)
        finish(tmp_path, log)
    assert set(hit) == set(POINTS), f"seed {seed}: the kills hit {hit}, not every point of a run"
    got = (tmp_path / "out.txt").read_text().splitlines()
    assert sorted(got) == expected(), f"seed {seed} (kills at {hit})"
    assert not wait_gone(tmp_path)


def test_python_worker_killed_mid_batch_is_retried_by_spark(tmp_path: Path) -> None:
    """local[2,4]: Spark retries a failed task up to 4 times; the task's worker is started again."""
    pipeline(tmp_path, "local[2,4]")
    killed = 0
    with open(tmp_path / "run.log", "ab") as log:
        proc = start(tmp_path, log)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and not killed:
            for w in ours(tmp_path):
                if "fanout" in " ".join(w.cmdline()):
                    parent = w.parent()
                    if parent is not None and "pyspark" in " ".join(parent.cmdline()):
                        time.sleep(0.3)
                        parent.kill()  # the Spark Python worker running the task
                        killed += 1
                        break
            time.sleep(0.2)
        assert proc.wait(300) == 0, (tmp_path / "run.log").read_text()[-3000:]
    assert killed == 1
    assert sorted((tmp_path / "out.txt").read_text().splitlines()) == expected()
    assert not wait_gone(tmp_path)


def test_a_micro_batch_commits_only_once_its_messages_are_loaded(tmp_path: Path) -> None:
    """The sink's task returns only after its L-worker's EOPs: when Spark writes ``commits/K``,
    every message of micro-batches 0..K is in the sink already.  The L-worker waits half a
    second before it loads each message, so a task that returned on writing its input would
    let the commit appear first; the driver is SIGKILLed at that moment, and the rerun starts
    after batch K, so what it had not loaded would be lost."""
    n, per_batch = 24, 6
    flags = tmp_path / "flags"
    flags.mkdir()
    (tmp_path / "stages.yaml").write_text(
        f"""
stages:
  - {{name: src, type: E, mode: cyclic, command: [{PY}, {TW}, count, "{n}", "{per_batch}"]}}
  - {{name: sink, type: L, command: [{PY}, {MISBEHAVE}, {flags}, append={tmp_path / "out.txt"}, lag@*]}}
engine: {{kind: spark, master: "local[2]"}}
"""
    )
    commits = tmp_path / ".etlstage" / "stages" / "spark-checkpoint" / "commits"
    out = tmp_path / "out.txt"
    with open(tmp_path / "run.log", "ab") as log:
        proc = start(tmp_path, log)
        try:
            deadline = time.monotonic() + 240
            while not (commits.is_dir() and any(p.name.isdigit() for p in commits.iterdir())):
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "run.log").read_text()[-3000:]
                time.sleep(0.02)
            first = min(int(p.name) for p in commits.iterdir() if p.name.isdigit())
            loaded = set(out.read_text().splitlines()) if out.exists() else set()
            os.killpg(proc.pid, signal.SIGKILL)  # at the commit: nothing after it may be needed
            assert {str(i) for i in range((first + 1) * per_batch)} <= loaded, (first, sorted(loaded, key=int))
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        assert not wait_gone(tmp_path)
        finish(tmp_path, log)
    assert set(out.read_text().splitlines()) == {str(i) for i in range(n)}


def wait_for_commit(tmp: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    commits = tmp / ".etlstage" / "stages" / "spark-checkpoint" / "commits"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if commits.is_dir() and any(p.name.isdigit() for p in commits.iterdir()):
            return
        time.sleep(0.3)
    raise AssertionError((tmp / "run.log").read_text()[-3000:])


@pytest.mark.parametrize("whole_group", [False, True], ids=["etlstage-alone", "process-group"])
def test_sigterm_stops_an_endless_run(tmp_path: Path, whole_group: bool) -> None:
    """SIGTERM to etlstage alone: the query stops, exit 0. To the whole process group (the JVM
    gets it too): exit 1 with a plain explanation, no traceback. Never a worker left behind."""
    pipeline(tmp_path, "local[2]")
    text = (tmp_path / "stages.yaml").read_text().replace('"6"]}', '"1"]}')  # 1 message a cycle: a long run
    (tmp_path / "stages.yaml").write_text(text.replace('master: "local[2]"}', 'master: "local[2]", trigger: 1}'))
    with open(tmp_path / "run.log", "ab") as log:
        proc = subprocess.Popen(
            [*ETLSTAGE, "run", "stages.yaml", "--no-progress"],
            cwd=tmp_path,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        try:
            wait_for_commit(tmp_path, proc)
            if whole_group:
                os.killpg(proc.pid, signal.SIGTERM)
            else:
                proc.send_signal(signal.SIGTERM)
            code = proc.wait(90)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    text = (tmp_path / "run.log").read_text()
    assert "received SIGTERM: stopping the query" in text
    if whole_group:
        assert code == 1 and "Spark's JVM went away with the signal" in text
        assert 'File "' + str(ROOT / "etlstage") not in text  # no traceback of ours
    else:
        assert code == 0, text[-3000:]
    assert not wait_gone(tmp_path)
