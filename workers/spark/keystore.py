"""The SQLite key index: which key was published by which batch, and each batch's state.

One database per output dataset, shared by the stage's instances (WAL, busy timeout).
A batch moves ``claimed`` → ``staged`` → ``committed``:

- ``claimed``: its keys are reserved; staging may be incomplete (recovery drops it —
  the batch was never acknowledged, so the supervisor sends it again);
- ``staged``: Spark's files are complete and synced in the staging directory, the intent
  to publish is recorded (recovery finishes publishing);
- ``committed``: the files are in the dataset; its keys are duplicates from now on.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Collection, Iterable

SCHEMA = """
CREATE TABLE IF NOT EXISTS batches(
    batch TEXT PRIMARY KEY, instance INTEGER NOT NULL, state TEXT NOT NULL,
    created REAL NOT NULL, counts TEXT NOT NULL DEFAULT '{}', duplicates INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS keys(key TEXT PRIMARY KEY, batch TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS stats(name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""

CLAIMED, STAGED, COMMITTED = "claimed", "staged", "committed"


class KeyStore:
    def __init__(self, path: str, busy_timeout_s: float = 60.0) -> None:
        self.path = path
        self.db = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")  # a commit is the durability point of the protocol
        self.db.execute("PRAGMA cache_size=-131072")  # 128 MB: key lookups are random B-tree probes
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    # --- load ------------------------------------------------------------------------

    def claim(self, batch: str, instance: int, keys: Collection[str]) -> dict[str, tuple[str, str | None]]:
        """Reserve ``keys`` (distinct) for ``batch``; return those held by other batches: key → (batch, state)."""
        doc = json.dumps(list(keys))
        with self._write():
            self.db.execute(
                "INSERT INTO batches(batch, instance, state, created) VALUES (?, ?, ?, ?)",
                (batch, instance, CLAIMED, time.time()),
            )
            cursor = self.db.execute(
                "INSERT OR IGNORE INTO keys(key, batch) SELECT value, ? FROM json_each(?)", (batch, doc)
            )
            if cursor.rowcount == len(keys):
                return {}  # the common case: every key is new
            rows = self.db.execute(
                "SELECT j.value, k.batch, b.state FROM json_each(?) j JOIN keys k ON k.key = j.value "
                "LEFT JOIN batches b ON b.batch = k.batch WHERE k.batch != ?",
                (doc, batch),
            ).fetchall()
        return {key: (other, state) for key, other, state in rows}

    def reclaim(self, batch: str, keys: Iterable[str]) -> dict[str, tuple[str, str | None]]:
        """Try again for keys that another batch held: claim the released ones."""
        doc = json.dumps(list(keys))
        with self._write():
            self.db.execute(
                "DELETE FROM keys WHERE key IN (SELECT value FROM json_each(?)) "
                "AND batch NOT IN (SELECT batch FROM batches)",
                (doc,),
            )
            self.db.execute("INSERT OR IGNORE INTO keys(key, batch) SELECT value, ? FROM json_each(?)", (batch, doc))
            rows = self.db.execute(
                "SELECT j.value, k.batch, b.state FROM json_each(?) j JOIN keys k ON k.key = j.value "
                "LEFT JOIN batches b ON b.batch = k.batch WHERE k.batch != ?",
                (doc, batch),
            ).fetchall()
        return {key: (other, state) for key, other, state in rows}

    def mark_staged(self, batch: str, counts: dict[str, int], duplicates: int) -> None:
        with self._write():
            self.db.execute(
                "UPDATE batches SET state = ?, counts = ?, duplicates = ? WHERE batch = ?",
                (STAGED, json.dumps(counts), duplicates, batch),
            )

    def mark_committed(self, batch: str) -> None:
        with self._write():
            row = self.db.execute("SELECT counts, duplicates FROM batches WHERE batch = ?", (batch,)).fetchone()
            self.db.execute("UPDATE batches SET state = ? WHERE batch = ?", (COMMITTED, batch))
            counts = json.loads(row[0]) if row else {}
            self._add_stats(
                {"batches": 1, "duplicates": row[1] if row else 0, **{f"rows.{t}": n for t, n in counts.items()}}
            )

    def release(self, batch: str) -> None:
        """Forget a claimed batch: its keys are free again (it was never acknowledged)."""
        with self._write():
            self.db.execute("DELETE FROM keys WHERE batch = ?", (batch,))
            self.db.execute("DELETE FROM batches WHERE batch = ? AND state != ?", (batch, COMMITTED))

    def finish_empty(self, batch: str, duplicates: int) -> None:
        """A batch with nothing new (it holds no keys): drop it, count its duplicates."""
        with self._write():
            self.db.execute("DELETE FROM batches WHERE batch = ?", (batch,))
            self._add_stats({"duplicates": duplicates, "batches": 1})

    # --- recovery and reporting ------------------------------------------------------

    def unfinished(self, instance: int) -> list[tuple[str, str]]:
        return self.db.execute(
            "SELECT batch, state FROM batches WHERE instance = ? AND state != ? ORDER BY created",
            (instance, COMMITTED),
        ).fetchall()

    def state_of(self, batch: str) -> str | None:
        row = self.db.execute("SELECT state FROM batches WHERE batch = ?", (batch,)).fetchone()
        return row[0] if row else None

    def stats(self) -> dict[str, int]:
        return dict(self.db.execute("SELECT name, value FROM stats ORDER BY name").fetchall())

    def _add_stats(self, deltas: dict[str, int]) -> None:
        self.db.executemany(
            "INSERT INTO stats(name, value) VALUES (?, ?) "
            "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
            [(k, v) for k, v in deltas.items() if v],
        )

    def _write(self) -> _Transaction:
        return _Transaction(self.db)


class _Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT``: take the write lock up front (no upgrade deadlocks)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")
