"""One pipeline, one state: its own folder under state_dir, one run at a time, the flat layout migrated."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from etlstage.state.runlock import Holder, holder, last_holder
from tests.support.live_run import restarts_in_summary
from tests.support.run_cli import ETLSTAGE

# a cyclic extractor keeping its offset in $ETLSTAGE_STATE_DIR: 60 numbers, 10 a window
COUNTING = """
    name: {name}
    stages:
      - {{name: numbers, type: E, mode: cyclic, offsets: worker, command: ["{{PY}}", "{{TW}}", count, "60", "10"]}}
      - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, {out}]}}
"""
# a run that holds its state until stopped: a plain extractor that says nothing
WAITING = """
    name: {name}
    stages:
      - {{name: quiet, type: E, command: ["sleep", "600"]}}
      - {{name: sink, type: L, command: ["{{PY}}", "{{TW}}", append, out.txt]}}
"""


def _start(pdir, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*ETLSTAGE, "run", "--no-progress", *args],
        cwd=pdir.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its workers with it, for the clean-up
    )


def _held(state: Path, timeout: float = 30.0) -> Holder:
    deadline = time.monotonic() + timeout
    while (found := holder(state)) is None:
        assert time.monotonic() < deadline, f"no run took {state}/run.lock"
        time.sleep(0.05)
    return found


def _stop_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate(timeout=30)


def test_two_files_in_one_folder_in_turn_keep_their_own_state(pdir):
    pdir.write(COUNTING.format(name="a", out="a.txt"), "a.yaml")
    pdir.write(COUNTING.format(name="b", out="b.txt"), "b.yaml")
    for name in ("a", "b"):
        r = pdir.etlstage("run", f"{name}.yaml", "--once", "--no-progress")
        assert r.code == 0, r.stderr
        assert "extracted 60 messages" in r.stderr, r.stderr
        assert sorted(map(int, pdir.lines(f"{name}.txt"))) == list(range(60))
        assert (pdir.path / ".etlstage" / name / "stages" / "numbers" / "offset-0").read_text() == "60"
    assert "/.etlstage/b/state.db" in pdir.etlstage("status", "b.yaml").stdout


@pytest.mark.slow  # two runs of 150 windows each, long enough to overlap: 13-20 s
def test_two_files_in_one_folder_at_once_keep_their_own_state(pdir):
    for name in ("a", "b"):  # long enough for the two runs to overlap
        pdir.write(COUNTING.format(name=name, out=f"{name}.txt").replace('"60", "10"', '"1500", "10"'), f"{name}.yaml")
    procs = [_start(pdir, f"{n}.yaml", "--once") for n in ("a", "b")]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert set(restarts_in_summary(err).values()) == {0}, err  # no worker tripped over the other's files
    for name in ("a", "b"):
        assert sorted(map(int, pdir.lines(f"{name}.txt"))) == list(range(1500))


def test_two_files_naming_one_pipeline_are_refused_naming_both(pdir):
    pdir.write(COUNTING.format(name="orders", out="a.txt"), "a.yaml")
    pdir.write(COUNTING.format(name="orders", out="b.txt"), "b.yaml")
    assert pdir.etlstage("run", "a.yaml", "--once", "--no-progress").code == 0
    # validate says what run will refuse
    v = pdir.etlstage("validate", "b.yaml")
    assert v.code == 0 and "b.yaml: valid." in v.stdout, v.stdout + v.stderr
    assert "warning:" in v.stderr and str(pdir.path / "a.yaml") in v.stderr and "run` refuses" in v.stderr, v.stderr
    assert "warning" not in pdir.etlstage("validate", "a.yaml").stderr  # the file that ran is fine
    r = pdir.etlstage("run", "b.yaml", "--once", "--no-progress")
    assert r.code == 2, r.stderr
    assert str(pdir.path / "a.yaml") in r.stderr and str(pdir.path / "b.yaml") in r.stderr, r.stderr
    assert "another `name:`" in r.stderr
    assert pdir.lines("b.txt") == []  # nothing started
    # renamed away: each has its own state again
    pdir.write(COUNTING.format(name="orders-b", out="b.txt"), "b.yaml")
    assert pdir.etlstage("run", "b.yaml", "--once", "--no-progress").code == 0
    assert sorted(map(int, pdir.lines("b.txt"))) == list(range(60))


def test_the_flat_layout_of_earlier_versions_is_moved_into_the_pipelines_folder_once(pdir):
    pdir.write(COUNTING.format(name="stages", out="out.txt"))
    assert pdir.run("--once").code == 0
    # put it back as earlier versions kept it: state.db and stages/ right in .etlstage
    state = pdir.path / ".etlstage"
    (state / "stages").rename(state / "old")
    for entry in (state / "old").iterdir():
        if entry.name != "run.lock":
            entry.rename(state / entry.name)
    (state / "old" / "run.lock").unlink()
    (state / "old").rmdir()
    assert (state / "state.db").is_file() and (state / "stages" / "numbers").is_dir()

    r = pdir.run("--once")
    assert r.code == 0, r.stderr
    assert r.stderr.count("moved the state kept in") == 1, r.stderr
    assert "extracted 0 messages" in r.stderr, r.stderr  # the committed offsets came along
    assert (state / "stages" / "state.db").is_file() and (state / "stages" / "stages" / "numbers").is_dir()
    assert not (state / "state.db").exists()
    again = pdir.run("--once")
    assert again.code == 0 and "moved the state" not in again.stderr, again.stderr
    assert len(pdir.lines("out.txt")) == 60


def test_a_second_run_of_the_same_file_is_refused_naming_the_holder(pdir):
    pdir.write(WAITING.format(name="orders"))
    state = pdir.path / ".etlstage" / "orders"
    first = _start(pdir, "stages.yaml")
    try:
        held = _held(state)
        assert held.pid == first.pid and held.engine == "supervisor"
        r = pdir.run("--once")
        assert r.code == 2, r.stderr
        assert f"pid {first.pid} on " in r.stderr and "engine supervisor" in r.stderr, r.stderr
        assert "started at 20" in r.stderr and "another run holds" in r.stderr
        assert "Traceback" not in r.stderr
        status = pdir.etlstage("status")
        assert f"run lock: held by pid {first.pid}" in status.stdout, status.stdout
        replay = pdir.etlstage("deadletter", "replay", "--all")
        assert replay.code == 2 and f"pid {first.pid}" in replay.stderr, replay.stderr
        assert first.poll() is None  # the holder runs on, untouched
    finally:
        _stop_group(first)


def test_a_second_run_on_the_spark_engine_is_refused_before_its_jvm_starts(pdir):
    pdir.write(WAITING.format(name="orders"))
    first = _start(pdir, "stages.yaml")
    try:
        _held(pdir.path / ".etlstage" / "orders")
        # no Java to be found: a JVM that started would fail with another message
        env = {"JAVA_HOME": str(pdir.path / "no-java"), "SPARK_HOME": str(pdir.path / "no-spark")}
        t0 = time.monotonic()
        r = pdir.etlstage("run", "stages.yaml", "--engine", "spark", "--once", "--no-progress", env=env)
        assert r.code == 2, r.stderr
        assert f"pid {first.pid} on " in r.stderr and "engine supervisor" in r.stderr, r.stderr
        assert "JAVA" not in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert time.monotonic() - t0 < 20
    finally:
        _stop_group(first)


def test_a_sigkilled_run_leaves_nothing_that_blocks_the_next(pdir):
    pdir.write(COUNTING.format(name="orders", out="out.txt").replace('"60", "10"', '"100000", "10"'))
    state = pdir.path / ".etlstage" / "orders"
    first = _start(pdir, "stages.yaml")
    try:
        _held(state)
        os.kill(first.pid, signal.SIGKILL)  # the supervisor alone: its workers may live on a while
        first.wait(timeout=30)
        assert holder(state) is None
        last = last_holder(state)
        assert last is not None and last.pid == first.pid  # what status and the next run read
        pdir.write(COUNTING.format(name="orders", out="out.txt"))
        r = pdir.run("--once")
        assert r.code == 0, r.stderr
    finally:
        _stop_group(first)


def test_status_names_no_holder_after_a_run(pdir):
    pdir.write(COUNTING.format(name="orders", out="out.txt"))
    assert pdir.run("--once").code == 0
    assert "run lock: free" in pdir.etlstage("status").stdout
