"""Checkpoints and sequence counters, in SQLite under the stage's state directory.

One file (default ``$ETLSTAGE_STATE_DIR/kcl-multilang.sqlite``) may be shared by a
stage's instances: WAL journal, a busy timeout, rows keyed by (stage, shard).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time

from etlstage.errors import StateError
from etlstage.worker.sqlite import connect, immediate

SCHEMA = """
CREATE TABLE IF NOT EXISTS kcl_checkpoint (
    stage TEXT NOT NULL, shard_id TEXT NOT NULL,
    sequence_number TEXT NOT NULL, sub_sequence_number INTEGER NOT NULL,
    updated_at REAL NOT NULL, PRIMARY KEY (stage, shard_id));
CREATE TABLE IF NOT EXISTS kcl_counter (
    stage TEXT NOT NULL, shard_id TEXT NOT NULL, next_value INTEGER NOT NULL,
    PRIMARY KEY (stage, shard_id));
"""


class CheckpointStore:
    def __init__(self, path: str, stage: str) -> None:
        self.path = path
        self.stage = stage
        self._lock = threading.Lock()  # one connection, used by the shard threads in turn
        try:
            if path != ":memory:":
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._db = connect(path, synchronous="NORMAL", threads=True, schema=SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise StateError(f"KCL checkpoint store {path!r}: cannot open ({exc})") from None

    def get(self, shard_id: str) -> tuple[str, int] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT sequence_number, sub_sequence_number FROM kcl_checkpoint WHERE stage=? AND shard_id=?",
                (self.stage, shard_id),
            ).fetchone()
        return (row[0], row[1]) if row else None

    def put(self, shard_id: str, seq: str, sub: int) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO kcl_checkpoint VALUES (?,?,?,?,?) ON CONFLICT(stage, shard_id) DO UPDATE SET "
                "sequence_number=excluded.sequence_number, sub_sequence_number=excluded.sub_sequence_number, "
                "updated_at=excluded.updated_at",
                (self.stage, shard_id, seq, sub, time.time()),
            )

    def allocate(self, shard_id: str, count: int) -> int:
        """Reserve ``count`` synthetic sequence numbers; returns the first (starting at 1)."""
        with self._lock:
            return self._allocate(shard_id, count)

    def _allocate(self, shard_id: str, count: int) -> int:
        with immediate(self._db) as db:
            row = db.execute(
                "SELECT next_value FROM kcl_counter WHERE stage=? AND shard_id=?", (self.stage, shard_id)
            ).fetchone()
            first = row[0] if row else 1
            db.execute(
                "INSERT INTO kcl_counter VALUES (?,?,?) ON CONFLICT(stage, shard_id) DO UPDATE SET "
                "next_value=excluded.next_value",
                (self.stage, shard_id, first + count),
            )
        return first

    def close(self) -> None:
        with self._lock:
            self._db.close()
