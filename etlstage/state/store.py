"""The state store: one SQLite file under ``state_dir`` (WAL, transactional).

It holds each E-stage's committed offsets (supervisor-managed) or progress
(worker-managed), the windows in flight, the dead-letter store and the running
supervisor's heartbeat, so ``etlstage status`` can read it while a pipeline runs.
Files and folders are created owner-only (0700 / 0600).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from etlstage.errors import StateError

SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    source TEXT PRIMARY KEY,          -- stage#instance of an E-stage
    committed_end TEXT,               -- JSON: the end of the last done window (supervisor offsets)
    window_seq INTEGER NOT NULL,      -- windows done so far
    messages INTEGER NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS windows (
    source TEXT NOT NULL,
    seq INTEGER NOT NULL,
    request TEXT,
    opened_at REAL NOT NULL,
    closed_at REAL,
    messages INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (source, seq)
);
CREATE TABLE IF NOT EXISTS deadletters (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    stage TEXT NOT NULL,
    created_at REAL NOT NULL,
    attempts INTEGER NOT NULL,
    error TEXT NOT NULL,
    messages INTEGER NOT NULL,
    inputs BLOB NOT NULL,             -- the messages, each followed by the stage's EOM
    eom INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'new' -- new | replay | replayed
);
CREATE TABLE IF NOT EXISTS runs (
    pid INTEGER NOT NULL,
    started_at REAL NOT NULL,
    heartbeat REAL NOT NULL,
    info TEXT
);
"""


@dataclass(frozen=True)
class DeadLetter:
    id: int
    stage: str
    created_at: float
    attempts: int
    error: str
    messages: int
    inputs: bytes
    eom: int
    status: str

    def split(self) -> list[bytes]:
        parts = self.inputs.split(bytes([self.eom]))
        parts.pop()
        return parts


def ensure_private_dir(path: str | Path) -> Path:
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(p, 0o700)
    return p


class StateStore:
    FILE = "state.db"

    def __init__(self, state_dir: str | Path) -> None:
        self.dir = ensure_private_dir(state_dir)
        self.path = self.dir / self.FILE
        fresh = not self.path.exists()
        if fresh:
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
            os.close(fd)
        try:
            self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.executescript(SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise StateError(f"state store {self.path}: {exc} (is it a SQLite file written by etlstage?)") from None
        for extra in ("-wal", "-shm"):
            side = Path(str(self.path) + extra)
            if side.exists():
                os.chmod(side, 0o600)

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # --- checkpoints and windows ------------------------------------------------------

    def committed(self, source: str) -> tuple[object, int]:
        """(committed end or None, windows done) of an E-stage instance."""
        row = self.db.execute("SELECT committed_end, window_seq FROM checkpoints WHERE source=?", (source,)).fetchone()
        if row is None:
            return None, 0
        return (json.loads(row[0]) if row[0] is not None else None), row[1]

    def open_window(self, source: str, seq: int, request: object) -> None:
        with self.tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO windows(source, seq, request, opened_at) VALUES (?,?,?,?)",
                (source, seq, None if request is None else json.dumps(request), time.time()),
            )

    def close_window(self, source: str, seq: int, messages: int) -> None:
        with self.tx() as db:
            db.execute(
                "UPDATE windows SET closed_at=?, messages=? WHERE source=? AND seq=?",
                (time.time(), messages, source, seq),
            )

    def commit(self, source: str, seq: int, end: object, messages: int) -> None:
        """Window ``seq`` of ``source`` and all before it are done: record it atomically."""
        with self.tx() as db:
            db.execute(
                "INSERT INTO checkpoints(source, committed_end, window_seq, messages, updated_at) VALUES (?,?,?,?,?) "
                "ON CONFLICT(source) DO UPDATE SET committed_end=excluded.committed_end, "
                "window_seq=excluded.window_seq, messages=checkpoints.messages+excluded.messages, "
                "updated_at=excluded.updated_at",
                (source, None if end is None else json.dumps(end), seq + 1, messages, time.time()),
            )
            db.execute("DELETE FROM windows WHERE source=? AND seq<=?", (source, seq))

    def forget_open_windows(self) -> int:
        """At start-up: windows left open by an earlier run will be extracted again."""
        with self.tx() as db:
            return db.execute("DELETE FROM windows").rowcount

    def checkpoints(self) -> list[tuple[str, object, int, int, float]]:
        rows = self.db.execute(
            "SELECT source, committed_end, window_seq, messages, updated_at FROM checkpoints ORDER BY source"
        ).fetchall()
        return [(r[0], json.loads(r[1]) if r[1] else None, r[2], r[3], r[4]) for r in rows]

    def open_windows(self) -> list[tuple[str, int, object, float, float | None, int]]:
        rows = self.db.execute(
            "SELECT source, seq, request, opened_at, closed_at, messages FROM windows ORDER BY source, seq"
        ).fetchall()
        return [(r[0], r[1], json.loads(r[2]) if r[2] else None, r[3], r[4], r[5]) for r in rows]

    # --- dead letters -------------------------------------------------------------------

    def add_deadletter(self, stage: str, attempts: int, error: str, inputs: bytes, messages: int, eom: int) -> int:
        with self.tx() as db:
            cur = db.execute(
                "INSERT INTO deadletters(stage, created_at, attempts, error, messages, inputs, eom) "
                "VALUES (?,?,?,?,?,?,?)",
                (stage, time.time(), attempts, error, messages, inputs, eom),
            )
            return int(cur.lastrowid or 0)

    def deadletters(self, status: str | None = None, stage: str | None = None) -> list[DeadLetter]:
        sql = "SELECT id, stage, created_at, attempts, error, messages, inputs, eom, status FROM deadletters"
        where, args = [], []
        if status:
            where.append("status=?")
            args.append(status)
        if stage:
            where.append("stage=?")
            args.append(stage)
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [DeadLetter(*r) for r in self.db.execute(sql + " ORDER BY id", args).fetchall()]

    def deadletter_counts(self) -> dict[str, int]:
        """Dead letters by status (new, replay, replayed), without reading their messages."""
        return dict(self.db.execute("SELECT status, COUNT(*) FROM deadletters GROUP BY status").fetchall())

    def deadletter(self, ident: int) -> DeadLetter | None:
        found = [d for d in self.deadletters() if d.id == ident]
        return found[0] if found else None

    def set_deadletter_status(self, ids: list[int], status: str) -> int:
        with self.tx() as db:
            return sum(db.execute("UPDATE deadletters SET status=? WHERE id=?", (status, i)).rowcount for i in ids)

    # --- the running supervisor -----------------------------------------------------------

    def heartbeat(self, info: dict[str, object]) -> None:
        with self.tx() as db:
            pid = os.getpid()
            cur = db.execute("UPDATE runs SET heartbeat=?, info=? WHERE pid=?", (time.time(), json.dumps(info), pid))
            if cur.rowcount == 0:
                db.execute(
                    "INSERT INTO runs(pid, started_at, heartbeat, info) VALUES (?,?,?,?)",
                    (pid, time.time(), time.time(), json.dumps(info)),
                )

    def end_run(self) -> None:
        """This run is over; so is any run that started before it (one that died unannounced)."""
        with self.tx() as db:
            pid = os.getpid()
            db.execute(
                "DELETE FROM runs WHERE pid=? OR started_at < (SELECT started_at FROM runs WHERE pid=?)", (pid, pid)
            )

    def runs(self) -> list[tuple[int, float, float, dict[str, object]]]:
        rows = self.db.execute("SELECT pid, started_at, heartbeat, info FROM runs").fetchall()
        return [(r[0], r[1], r[2], json.loads(r[3] or "{}")) for r in rows]
