"""Per-shard checkpoints and lag statistics in SQLite (``kinesis.sqlite`` in the state dir).

One row per shard the stage has seen: its parents, where to start when it has no
checkpoint yet, the checkpoint (sequence and sub-sequence number, compared as
integers, never moved backwards) and whether it reached SHARD_END.  The file is
shared by a stage's instances (WAL, busy timeout): an instance waiting to read a child
shard learns here that another instance finished the parent.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass

from etlstage.errors import StateError
from etlstage.worker.sqlite import connect, immediate

FILE_NAME = "kinesis.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS shards (
    stream      TEXT NOT NULL,
    shard_id    TEXT NOT NULL,
    parents     TEXT NOT NULL,          -- JSON list of parent shard ids
    start_type  TEXT NOT NULL,          -- TRIM_HORIZON | AT_TIMESTAMP | LATEST | SKIP
    start_ts    REAL,                   -- AT_TIMESTAMP, and LATEST once a run has begun
    seq         TEXT,                   -- checkpoint: last sequence number delivered
    subseq      INTEGER,                -- ... and its sub-sequence number
    complete    INTEGER NOT NULL DEFAULT 1,  -- 1: every sub-record of seq was delivered
    ended       INTEGER NOT NULL DEFAULT 0,  -- SHARD_END committed
    updated     REAL NOT NULL,
    PRIMARY KEY (stream, shard_id)
);
CREATE TABLE IF NOT EXISTS lag (
    stream      TEXT NOT NULL,
    shard_id    TEXT NOT NULL,
    instance    INTEGER NOT NULL,
    millis_behind_latest INTEGER,
    updated     REAL NOT NULL,
    PRIMARY KEY (stream, shard_id)
);
"""


@dataclass
class ShardRow:
    shard_id: str
    parents: list[str]
    start_type: str
    start_ts: float | None
    seq: str | None
    subseq: int | None
    complete: bool
    ended: bool


@dataclass(frozen=True)
class Commit:
    """What a finished window moves forward for one shard."""

    shard_id: str
    seq: str | None
    subseq: int | None
    complete: bool
    ended: bool


def position_key(seq: str | None, subseq: int | None) -> tuple[int, int]:
    """Sequence numbers are decimal strings of up to 128 bits: compare them as integers."""
    return (int(seq) if seq else -1, subseq if subseq is not None else -1)


class CheckpointStore:
    def __init__(self, state_dir: str | None, stream: str) -> None:
        self.stream = stream
        if state_dir:
            os.makedirs(state_dir, exist_ok=True)
            self.path = os.path.join(state_dir, FILE_NAME)
        else:
            self.path = ":memory:"
        try:
            # The extractor's reader thread and its request loop share it, one at a time (its lock).
            self._db = connect(self.path, threads=True, schema=_SCHEMA)
        except sqlite3.Error as exc:
            raise StateError(f"kinesis checkpoint store {self.path!r}: cannot open ({exc})") from None

    def close(self) -> None:
        self._db.close()

    # --- reading ----------------------------------------------------------------------

    def rows(self) -> dict[str, ShardRow]:
        cur = self._db.execute(
            "SELECT shard_id, parents, start_type, start_ts, seq, subseq, complete, ended FROM shards WHERE stream=?",
            (self.stream,),
        )
        return {r[0]: ShardRow(r[0], json.loads(r[1]), r[2], r[3], r[4], r[5], bool(r[6]), bool(r[7])) for r in cur}

    def ended(self, shard_ids: Iterable[str]) -> set[str]:
        ids = list(shard_ids)
        if not ids:
            return set()
        marks = ",".join("?" * len(ids))
        cur = self._db.execute(
            f"SELECT shard_id FROM shards WHERE stream=? AND ended=1 AND shard_id IN ({marks})", (self.stream, *ids)
        )
        return {r[0] for r in cur}

    # --- writing ----------------------------------------------------------------------

    def register(self, new: list[ShardRow]) -> None:
        """Insert shards seen for the first time; rows another instance wrote win."""
        if not new:
            return
        now = time.time()
        with immediate(self._db):
            self._db.executemany(
                "INSERT OR IGNORE INTO shards (stream, shard_id, parents, start_type, start_ts, seq, subseq, "
                "complete, ended, updated) VALUES (?,?,?,?,?,?,?,?,?,?)",
                [
                    (
                        self.stream,
                        r.shard_id,
                        json.dumps(r.parents),
                        r.start_type,
                        r.start_ts,
                        r.seq,
                        r.subseq,
                        int(r.complete),
                        int(r.ended),
                        now,
                    )
                    for r in new
                ],
            )

    def fix_start(self, shard_id: str, start_type: str, start_ts: float) -> None:
        """Pin a LATEST start to the time this run began, so a restart loses nothing."""
        with immediate(self._db):
            self._db.execute(
                "UPDATE shards SET start_type=?, start_ts=?, updated=? WHERE stream=? AND shard_id=? AND seq IS NULL",
                (start_type, start_ts, time.time(), self.stream, shard_id),
            )

    def commit(self, commits: Iterable[Commit]) -> None:
        """Move checkpoints forward in one transaction (never backwards)."""
        commits = list(commits)
        if not commits:
            return
        now = time.time()
        with immediate(self._db):
            for c in commits:
                row = self._db.execute(
                    "SELECT seq, subseq FROM shards WHERE stream=? AND shard_id=?", (self.stream, c.shard_id)
                ).fetchone()
                if row is None:
                    where = f"kinesis checkpoint store {self.path!r}"
                    raise StateError(f"{where}: shard {c.shard_id!r} was never registered")
                if c.seq is not None and position_key(c.seq, c.subseq) > position_key(row[0], row[1]):
                    self._db.execute(
                        "UPDATE shards SET seq=?, subseq=?, complete=?, updated=? WHERE stream=? AND shard_id=?",
                        (c.seq, c.subseq, int(c.complete), now, self.stream, c.shard_id),
                    )
                if c.ended:
                    self._db.execute(
                        "UPDATE shards SET ended=1, updated=? WHERE stream=? AND shard_id=?",
                        (now, self.stream, c.shard_id),
                    )

    def write_lag(self, instance: int, lags: dict[str, int]) -> None:
        if not lags:
            return
        now = time.time()
        with immediate(self._db):
            self._db.executemany(
                "INSERT OR REPLACE INTO lag (stream, shard_id, instance, millis_behind_latest, updated) "
                "VALUES (?,?,?,?,?)",
                [(self.stream, shard, instance, ms, now) for shard, ms in lags.items()],
            )
