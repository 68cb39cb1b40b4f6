"""A process killed while it creates a state store leaves no half of the schema behind: the
next run opens the store as new instead of refusing it as damaged."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

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
