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
import threading
import time
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager

from etlstage.errors import EtlstageError
from etlstage.worker.sqlite import connect, immediate

SCHEMA = """
CREATE TABLE IF NOT EXISTS batches(
    id INTEGER PRIMARY KEY, batch TEXT NOT NULL UNIQUE, instance INTEGER NOT NULL, state TEXT NOT NULL,
    created REAL NOT NULL, counts TEXT NOT NULL DEFAULT '{}', duplicates INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS keys(key TEXT PRIMARY KEY, batch INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS stats(name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""
# Format 1 named the batch in every key row; format 2 stores the batch's integer id
# (a third smaller index, faster claims).  A format-1 index is converted on opening.
FORMAT = 2
FROM_FORMAT_1 = (
    """
ALTER TABLE batches RENAME TO batches_v1;
ALTER TABLE keys RENAME TO keys_v1;
"""
    + SCHEMA
    + """
INSERT INTO batches(batch, instance, state, created, counts, duplicates)
    SELECT batch, instance, state, created, counts, duplicates FROM batches_v1 ORDER BY created;
INSERT INTO keys(key, batch) SELECT k.key, b.id FROM keys_v1 k JOIN batches b ON b.batch = k.batch;
DROP TABLE keys_v1;
DROP TABLE batches_v1;
"""
)
# Keys held by a batch other than ours: (key, that batch's name, its state — NULL once it is released).
HELD_ELSEWHERE = (
    "SELECT j.value, b.batch, b.state FROM json_each(?) j JOIN keys k ON k.key = j.value "
    "LEFT JOIN batches b ON b.id = k.batch WHERE k.batch != ?"
)

CLAIMED, STAGED, COMMITTED = "claimed", "staged", "committed"


class KeyIndexTooNew(EtlstageError):
    """The key index was written by a newer version: refuse rather than misread it."""

    exit_code = 2


class KeyStore:
    """The key index of one dataset; its methods may be called from several threads."""

    def __init__(self, path: str, busy_timeout_s: float = 60.0) -> None:
        self.path = path
        # synchronous=FULL: a commit is the durability point of the protocol.
        self.db = connect(path, timeout=busy_timeout_s, threads=True)
        # One connection, one transaction at a time: the loader claims the next batch's
        # keys while the previous batch is recorded from its writer thread.
        self._lock = threading.RLock()
        self.db.execute("PRAGMA cache_size=-131072")  # 128 MB: key lookups are random B-tree probes
        with self._write():
            self._create_or_convert()

    def _create_or_convert(self) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > FORMAT:
            raise KeyIndexTooNew(
                f"key index {self.path}: format {version} is newer than this etlstage-spark-load "
                f"(format {FORMAT}); upgrade etlstage"
            )
        columns = [row[1] for row in self.db.execute("PRAGMA table_info(batches)")]
        script = FROM_FORMAT_1 if columns and "id" not in columns else SCHEMA
        for statement in script.split(";"):  # in this transaction: executescript would commit it
            if statement.strip():
                self.db.execute(statement)
        self.db.execute(f"PRAGMA user_version = {FORMAT}")

    def close(self) -> None:
        with self._lock:
            self.db.close()

    # --- load ------------------------------------------------------------------------

    def claim(self, batch: str, instance: int, keys: Collection[str]) -> dict[str, tuple[str, str | None]]:
        """Reserve ``keys`` (distinct) for ``batch``; return those held by other batches: key → (batch, state)."""
        # Sorted, the inserts walk the index's pages in order: ~40% less time once it is large.
        doc = json.dumps(sorted(keys))
        # Not a durability point: a claim lost in a crash belongs to a batch that was not
        # acknowledged, and the next FULL commit (mark_staged) syncs the log up to it.
        with self._write(durable=False):
            batch_id = self.db.execute(
                "INSERT INTO batches(batch, instance, state, created) VALUES (?, ?, ?, ?)",
                (batch, instance, CLAIMED, time.time()),
            ).lastrowid
            cursor = self.db.execute(
                "INSERT OR IGNORE INTO keys(key, batch) SELECT value, ? FROM json_each(?)", (batch_id, doc)
            )
            if cursor.rowcount == len(keys):
                return {}  # the common case: every key is new
            rows = self.db.execute(HELD_ELSEWHERE, (doc, batch_id)).fetchall()
        return {key: (other, state) for key, other, state in rows}

    def reclaim(self, batch: str, keys: Iterable[str]) -> dict[str, tuple[str, str | None]]:
        """Try again for keys that another batch held: claim the released ones."""
        doc = json.dumps(sorted(keys))
        with self._write():
            batch_id = self._id_of(batch)
            self.db.execute(
                "DELETE FROM keys WHERE key IN (SELECT value FROM json_each(?)) "
                "AND batch NOT IN (SELECT id FROM batches)",
                (doc,),
            )
            self.db.execute("INSERT OR IGNORE INTO keys(key, batch) SELECT value, ? FROM json_each(?)", (batch_id, doc))
            rows = self.db.execute(HELD_ELSEWHERE, (doc, batch_id)).fetchall()
        return {key: (other, state) for key, other, state in rows}

    def _id_of(self, batch: str) -> int:
        row = self.db.execute("SELECT id FROM batches WHERE batch = ?", (batch,)).fetchone()
        if row is None:
            raise KeyError(f"batch {batch} is not in the key index {self.path}")
        return int(row[0])

    def mark_staged(self, batch: str, counts: dict[str, int], duplicates: int) -> None:
        with self._write():
            self.db.execute(
                "UPDATE batches SET state = ?, counts = ?, duplicates = ? WHERE batch = ?",
                (STAGED, json.dumps(counts), duplicates, batch),
            )

    def mark_committed(self, batch: str) -> None:
        # Not a durability point: if a crash loses it, the batch is still ``staged`` and
        # recovery publishes it again (a no-op: its files are in place) and marks it then.
        with self._write(durable=False):
            row = self.db.execute("SELECT counts, duplicates FROM batches WHERE batch = ?", (batch,)).fetchone()
            self.db.execute("UPDATE batches SET state = ? WHERE batch = ?", (COMMITTED, batch))
            counts = json.loads(row[0]) if row else {}
            self._add_stats(
                {"batches": 1, "duplicates": row[1] if row else 0, **{f"rows.{t}": n for t, n in counts.items()}}
            )

    def release(self, batch: str) -> None:
        """Forget a claimed batch: its keys are free again (it was never acknowledged)."""
        with self._write():
            self.db.execute("DELETE FROM keys WHERE batch = (SELECT id FROM batches WHERE batch = ?)", (batch,))
            self.db.execute("DELETE FROM batches WHERE batch = ? AND state != ?", (batch, COMMITTED))

    def finish_empty(self, batch: str, duplicates: int) -> None:
        """A batch with nothing new (it holds no keys): drop it, count its duplicates."""
        with self._write():
            self.db.execute("DELETE FROM batches WHERE batch = ?", (batch,))
            self._add_stats({"duplicates": duplicates, "batches": 1})

    # --- recovery and reporting ------------------------------------------------------

    def unfinished(self, instance: int) -> list[tuple[str, str]]:
        with self._lock:
            return self.db.execute(
                "SELECT batch, state FROM batches WHERE instance = ? AND state != ? ORDER BY id",
                (instance, COMMITTED),
            ).fetchall()

    def state_of(self, batch: str) -> str | None:
        with self._lock:
            row = self.db.execute("SELECT state FROM batches WHERE batch = ?", (batch,)).fetchone()
        return row[0] if row else None

    def stats(self) -> dict[str, int]:
        with self._lock:
            return dict(self.db.execute("SELECT name, value FROM stats ORDER BY name").fetchall())

    def _add_stats(self, deltas: dict[str, int]) -> None:
        self.db.executemany(
            "INSERT INTO stats(name, value) VALUES (?, ?) "
            "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
            [(k, v) for k, v in deltas.items() if v],
        )

    @contextmanager
    def _write(self, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """A write transaction under the connection's lock; ``durable=False`` commits
        without fsync (WAL, ``synchronous=NORMAL``) for what start-up recovery redoes."""
        with self._lock:
            if not durable:
                self.db.execute("PRAGMA synchronous=NORMAL")
            try:
                with immediate(self.db):
                    yield self.db
            finally:
                if not durable:
                    self.db.execute("PRAGMA synchronous=FULL")
