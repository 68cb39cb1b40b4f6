"""A process killed while it creates a state store leaves no half of the schema behind: the
next run opens the store as new instead of refusing it as damaged."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from etlstage.state.sqlite import apply_schema, connect
from etlstage.state.store import StateStore

# The creating process dies between two CREATE TABLE statements of the store's schema.
DIES_MID_SCHEMA = """
import os, sys
import etlstage.state.store as store
real = store.connect
def connect(*args, **kwargs):
    db = real(*args, **kwargs)
    db.create_function("die", 0, lambda: os.kill(os.getpid(), 9))
    return db
store.connect = connect
store.SCHEMA = store.SCHEMA.replace(
    "CREATE TABLE IF NOT EXISTS windows", "SELECT die();\\nCREATE TABLE IF NOT EXISTS windows", 1
)
assert "die()" in store.SCHEMA
store.StateStore(sys.argv[1])
"""


def test_a_store_whose_creator_was_killed_mid_schema_opens_as_new(tmp_path: Path) -> None:
    state = tmp_path / "state"
    died = subprocess.run([sys.executable, "-c", DIES_MID_SCHEMA, str(state)], capture_output=True, timeout=60)
    assert died.returncode == -signal.SIGKILL, died.stderr
    store = StateStore(state)  # the old code: "damaged ... it has no table windows", exit 2
    try:
        tables = {r[0] for r in store.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"checkpoints", "windows", "deadletters", "runs"} <= tables
    finally:
        store.close()


def test_a_failing_schema_leaves_nothing_and_no_open_transaction(tmp_path: Path) -> None:
    db = connect(tmp_path / "x.db")
    try:
        apply_schema(db, "CREATE TABLE a (x INTEGER);\nCREATE TABLE a (y INTEGER);")
    except sqlite3.OperationalError:
        pass
    else:
        raise AssertionError("the second CREATE TABLE a must fail")
    assert not db.in_transaction
    assert db.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)


def _locked_for(path: Path, seconds: float) -> threading.Thread:
    """Another connection holds the write lock of a new (rollback-journal) store for ``seconds``."""
    other = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    other.execute("CREATE TABLE first (x INTEGER)")

    def release() -> None:
        time.sleep(seconds)
        other.execute("COMMIT")
        other.close()

    holder = threading.Thread(target=release)
    holder.start()
    return holder


def test_opening_a_store_another_connection_is_creating_waits_for_its_lock(tmp_path: Path) -> None:
    """Two workers opening one new store at once (the stock RDSS stage's two instances on
    a first run): SQLite refuses the switch to WAL at once while the other holds its lock,
    busy timeout or not; the open waits for the lock instead of failing the worker."""
    path = tmp_path / "shared.sqlite"
    holder = _locked_for(path, 0.3)
    started = time.monotonic()
    db = connect(path, timeout=10, schema="CREATE TABLE IF NOT EXISTS second (y INTEGER)")
    waited = time.monotonic() - started
    holder.join()
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert {r[0] for r in db.execute("SELECT name FROM sqlite_master")} == {"first", "second"}
    assert waited >= 0.2  # it waited for the lock (the refusal comes in well under a millisecond)


def test_a_lock_held_past_the_timeout_still_fails_naming_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    holder = _locked_for(path, 1.5)
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            connect(path, timeout=0.3)
    finally:
        holder.join()


def test_opening_a_store_another_connection_locks_waits_with_growing_pauses(tmp_path: Path, monkeypatch) -> None:
    """SQLite refuses the switch to WAL at once while another connection holds a lock;
    ``connect`` tries again after pauses that double up to 0.1 s (no busy loop), and
    succeeds once the lock is gone."""
    import etlstage.state.sqlite as sqlite_module

    path = tmp_path / "locked.db"
    holder = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")  # a writer's lock: SQLite refuses the WAL switch at once, no busy wait
    pauses: list[float] = []
    real_sleep = time.sleep
    opener = threading.get_ident()

    def recorded(seconds: float) -> None:
        # The patch is on the shared ``time`` module: other threads' sleeps are not ours.
        if threading.get_ident() == opener:
            pauses.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(sqlite_module.time, "sleep", recorded)
    release = threading.Timer(1.0, holder.rollback)
    release.start()
    try:
        db = connect(path, timeout=10)
    finally:
        release.join()
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert pauses[:5] == [0.005, 0.01, 0.02, 0.04, 0.08], pauses
    assert all(p == 0.1 for p in pauses[5:]), pauses  # capped: the count depends on the machine's pace
    db.close()
    holder.close()
