"""SQLite the way every store of the project opens it: autocommit connections, WAL,
and write transactions that take the write lock up front.

``BEGIN IMMEDIATE`` rather than ``BEGIN``: a deferred transaction that reads first and
writes later must upgrade its lock and can deadlock against another writer; taking the
lock at the start makes it wait (``timeout``) instead.

>>> db = connect(":memory:", schema="CREATE TABLE t (x INTEGER)")
>>> with immediate(db):
...     _ = db.execute("INSERT INTO t VALUES (1)")
>>> db.execute("SELECT x FROM t").fetchall()
[(1,)]
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def connect(
    path: str | Path,
    *,
    synchronous: str = "FULL",
    timeout: float = 30.0,
    threads: bool = False,
    schema: str = "",
) -> sqlite3.Connection:
    """An autocommit connection in WAL mode (``:memory:`` has none) with ``schema`` applied.

    ``synchronous``: ``FULL`` where a commit must survive a power cut (offsets, the LDR),
    ``NORMAL`` where a lost last commit is redone (claims, counters).  ``threads``: the
    connection is shared by threads that take turns (the caller holds a lock).
    """
    db = sqlite3.connect(str(path), timeout=timeout, isolation_level=None, check_same_thread=not threads)
    if str(path) != ":memory:":
        _wal(db, timeout)
    db.execute(f"PRAGMA synchronous={synchronous}")
    if schema:
        apply_schema(db, schema)
    return db


def _wal(db: sqlite3.Connection, timeout: float) -> None:
    """WAL mode, waiting up to ``timeout`` for another connection's lock.

    SQLite answers a journal-mode change that meets a lock with "database is locked" at
    once, without its busy timeout: two workers opening one new store together (the
    stock RDSS stage's two instances on a first run) would see one of them fail.
    """
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(2 * delay, 0.1)


def apply_schema(db: sqlite3.Connection, schema: str) -> None:
    """``schema``'s statements in one transaction: a process killed halfway leaves none of
    them (SQLite's DDL is transactional), never a store with some tables and not others."""
    try:
        db.executescript(f"BEGIN IMMEDIATE;\n{schema}\n;COMMIT;")  # the schema may lack its last ";"
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


@contextmanager
def immediate(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``; ``ROLLBACK`` when the block raises."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


__all__ = ["connect", "immediate"]
