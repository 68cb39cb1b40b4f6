"""The run lock (state.runlock) on its own: a reader's instant shared lock is waited out,
a run's lock refuses a second run at once."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from etlstage.errors import StateError
from etlstage.state import runlock
from etlstage.state.runlock import FILE, RunLock


def test_a_readers_brief_shared_lock_is_waited_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``status`` takes a shared lock for an instant: a run starting then takes the lock once
    it is let go, instead of calling the pipeline busy."""
    fd = os.open(tmp_path / FILE, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)
    retried = threading.Event()
    release = threading.Timer(0.2, lambda: os.close(fd))  # the reader lets go while the run retries
    sleep = time.sleep

    def retry(seconds: float) -> None:  # the run's first retry: the reader holds the lock a moment more
        if not retried.is_set():
            retried.set()
            release.start()
        sleep(seconds)

    monkeypatch.setattr(runlock.time, "sleep", retry)
    lock = RunLock(tmp_path)
    try:
        me = lock.acquire("supervisor", "stages.yaml")
    finally:
        monkeypatch.undo()
        if retried.is_set():
            release.join()
        else:
            os.close(fd)
    assert retried.is_set() and me.pid == os.getpid()
    lock.release()


def test_a_held_lock_refuses_a_second_run_naming_the_holder(tmp_path: Path) -> None:
    first = RunLock(tmp_path)
    first.acquire("supervisor", "stages.yaml")
    try:
        with pytest.raises(StateError, match="another run holds this pipeline's state"):
            RunLock(tmp_path).acquire("spark", "stages.yaml")
    finally:
        first.release()


def test_the_holder_is_named_while_a_run_holds_the_lock_and_none_after(tmp_path: Path) -> None:
    """What `etlstage status` reads: the run holding the lock now, nobody once it let go
    (its details stay as the last run's)."""
    assert runlock.holder(tmp_path) is None  # no lock file yet
    lock = RunLock(tmp_path)
    me = lock.acquire("spark", "stages.yaml")
    try:
        now = runlock.holder(tmp_path)
        assert now is not None and (now.pid, now.engine) == (os.getpid(), "spark") and now == me
    finally:
        lock.release()
    assert runlock.holder(tmp_path) is None
    last = runlock.last_holder(tmp_path)
    assert last is not None and last.pid == os.getpid()


def test_each_run_writes_itself_as_the_last_run_and_a_deadletter_command_keeps_the_run_before(tmp_path: Path) -> None:
    """The lock file's details are the last run's (what the engine switch reads): a run
    writes its own engine and file over a longer entry of the run before (the file is
    truncated, not overwritten in place); a dead-letter command holds the lock briefly
    but is not a run, so the last run stays the one before it."""

    def take(engine: str, file: str) -> runlock.Holder:
        lock = RunLock(tmp_path)
        me = lock.acquire(engine, file)
        lock.release()
        return me

    take("supervisor", "/a/much/longer/path/to/the/first/pipeline/file/stages.yaml")
    take("spark", "/b.yaml")
    last = runlock.last_holder(tmp_path)
    assert last is not None, (tmp_path / FILE).read_text()  # no trailing bytes of the longer entry
    assert (last.engine, last.last_engine, last.last_file) == ("spark", "spark", "/b.yaml")

    take("deadletter", "/b.yaml")
    last = runlock.last_holder(tmp_path)
    assert last is not None and last.engine == "deadletter"
    assert (last.last_engine, last.last_file) == ("spark", "/b.yaml")  # the run before it

    take("supervisor", "/c.yaml")
    last = runlock.last_holder(tmp_path)
    assert last is not None and (last.last_engine, last.last_file) == ("supervisor", "/c.yaml")


def test_a_claim_refused_for_a_shared_state_lets_the_lock_go(tmp_path: Path) -> None:
    """``claim`` takes the lock, then finds another pipeline file sharing the state and
    refuses: the lock is let go, so the next claim (the right file) is not told a run holds it."""
    from etlstage.state.claim import claim

    state = tmp_path / "state"
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("")
    b.write_text("")
    claim(state, "supervisor", str(a), lambda other: False).release()  # a ran last
    with pytest.raises(StateError, match="share one state"):
        claim(state, "supervisor", str(b), lambda other: True)  # a still leads here
    claim(state, "supervisor", str(b), lambda other: False).release()
