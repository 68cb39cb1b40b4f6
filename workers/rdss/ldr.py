"""The Local Data Repository: one SQLite file (WAL) in ETLSTAGE_STATE_DIR.

Tables:

- ``messages``: every message received — the spec's messageId, messageClass, messageType,
  sequence, position and status (``RECEIVED``), plus the outcome, first/last seen and how
  many times it was seen (duplicates are counted, never dropped: see docs/workers/rdss.md).
- ``sequences``: one row per multi-message sequence: total, status ``OPEN`` → ``EMITTED``
  (reassembled and handed on; kept so a replay re-emits it) or ``TIMED_OUT``, and the emitted
  result.
- ``parts``: the parts of each sequence as received (the raw bytes), stored and committed
  before ``process()`` returns.
- ``replays``: for sequences that timed out, the keys of the inputs of the batch that emitted
  them, so a replay of that batch emits them again.

Instances of a stage may share the file: every batch is one ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from etlstage.worker.sqlite import connect

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    message_id TEXT PRIMARY KEY,
    message_class TEXT,
    message_type TEXT,
    sequence TEXT,
    position INTEGER,
    status TEXT NOT NULL,
    outcome TEXT,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    seen_count INTEGER NOT NULL DEFAULT 1
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS messages_last_seen ON messages (last_seen);
CREATE TABLE IF NOT EXISTS sequences (
    sequence TEXT PRIMARY KEY,
    total INTEGER NOT NULL,
    status TEXT NOT NULL,
    first_seen REAL NOT NULL,
    updated REAL NOT NULL,
    result BLOB
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS sequences_status ON sequences (status, first_seen);
CREATE TABLE IF NOT EXISTS parts (
    sequence TEXT NOT NULL,
    position INTEGER NOT NULL,
    message_id TEXT,
    raw BLOB NOT NULL,
    received REAL NOT NULL,
    PRIMARY KEY (sequence, position)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS replays (
    input_key BLOB NOT NULL,
    sequence TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (input_key, sequence)
) WITHOUT ROWID;
"""

OPEN, EMITTED, TIMED_OUT = "OPEN", "EMITTED", "TIMED_OUT"
RECEIVED = "RECEIVED"
_CHUNK = 500  # SQLite host parameters per IN (...) query


class LocalDataRepository:
    def __init__(self, path: str | Path, busy_timeout_s: float = 60.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = connect(self.path, timeout=busy_timeout_s, schema=SCHEMA)

    def close(self) -> None:
        self.db.close()

    # -- messages -----------------------------------------------------------------------
    def known_ids(self, ids: Sequence[str]) -> set[str]:
        known: set[str] = set()
        for i in range(0, len(ids), _CHUNK):
            chunk = ids[i : i + _CHUNK]
            marks = ",".join("?" * len(chunk))
            known.update(
                r[0] for r in self.db.execute(f"SELECT message_id FROM messages WHERE message_id IN ({marks})", chunk)
            )
        return known

    def record(self, rows: Iterable[tuple[Any, ...]], now: float) -> None:
        """rows: (messageId, messageClass, messageType, sequence, position, outcome)."""
        self.db.executemany(
            "INSERT INTO messages (message_id, message_class, message_type, sequence, position, status, outcome,"
            " first_seen, last_seen) VALUES (?, ?, ?, ?, ?, 'RECEIVED', ?, ?, ?)"
            " ON CONFLICT (message_id) DO UPDATE SET seen_count = seen_count + 1, last_seen = excluded.last_seen,"
            " outcome = excluded.outcome",
            [(*row, now, now) for row in rows],
        )

    # -- sequences ----------------------------------------------------------------------
    def sequence(self, sequence: str) -> tuple[int, str, float, bytes | None] | None:
        row = self.db.execute(
            "SELECT total, status, first_seen, result FROM sequences WHERE sequence = ?", (sequence,)
        ).fetchone()
        return None if row is None else (row[0], row[1], row[2], row[3])

    def open_sequence(self, sequence: str, total: int, now: float) -> None:
        self.db.execute(
            "INSERT INTO sequences (sequence, total, status, first_seen, updated) VALUES (?, ?, 'OPEN', ?, ?)",
            (sequence, total, now, now),
        )

    def set_status(self, sequence: str, status: str, now: float, result: bytes | None = None) -> None:
        self.db.execute(
            "UPDATE sequences SET status = ?, updated = ?, result = ? WHERE sequence = ?",
            (status, now, result, sequence),
        )

    def part(self, sequence: str, position: int) -> tuple[str | None, bytes] | None:
        row = self.db.execute(
            "SELECT message_id, raw FROM parts WHERE sequence = ? AND position = ?", (sequence, position)
        ).fetchone()
        return None if row is None else (row[0], bytes(row[1]))

    def add_part(self, sequence: str, position: int, message_id: str | None, raw: bytes, now: float) -> None:
        self.db.execute(
            "INSERT INTO parts (sequence, position, message_id, raw, received) VALUES (?, ?, ?, ?, ?)",
            (sequence, position, message_id, raw, now),
        )

    def part_count(self, sequence: str) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM parts WHERE sequence = ?", (sequence,)).fetchone()[0])

    def parts(self, sequence: str) -> list[tuple[int, bytes]]:
        rows = self.db.execute("SELECT position, raw FROM parts WHERE sequence = ? ORDER BY position", (sequence,))
        return [(r[0], bytes(r[1])) for r in rows]

    def overdue(self, before: float) -> list[tuple[str, int, float]]:
        rows = self.db.execute(
            "SELECT sequence, total, first_seen FROM sequences "
            "WHERE status = 'OPEN' AND first_seen < ? ORDER BY first_seen",
            (before,),
        )
        return [(r[0], r[1], r[2]) for r in rows]

    # -- replays of timed-out sequences ---------------------------------------------------
    def add_replay_keys(self, keys: Iterable[bytes], sequences: Sequence[str], now: float) -> None:
        self.db.executemany(
            "INSERT OR IGNORE INTO replays (input_key, sequence, created) VALUES (?, ?, ?)",
            [(k, s, now) for k in keys for s in sequences],
        )

    def replay_keys(self) -> set[bytes]:
        return {bytes(r[0]) for r in self.db.execute("SELECT DISTINCT input_key FROM replays")}

    def sequences_for_keys(self, keys: Sequence[bytes]) -> list[str]:
        found: list[str] = []
        for i in range(0, len(keys), _CHUNK):
            chunk = keys[i : i + _CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = self.db.execute(
                f"SELECT DISTINCT sequence FROM replays WHERE input_key IN ({marks}) ORDER BY sequence", chunk
            )
            found.extend(r[0] for r in rows if r[0] not in found)
        return found

    # -- retention ------------------------------------------------------------------------
    def purge(self, before: float) -> int:
        """Forget messages last seen, and finished sequences last updated, before ``before``."""
        n = self.db.execute("DELETE FROM messages WHERE last_seen < ?", (before,)).rowcount
        done = [
            r[0]
            for r in self.db.execute("SELECT sequence FROM sequences WHERE status != 'OPEN' AND updated < ?", (before,))
        ]
        for s in done:
            self.db.execute("DELETE FROM parts WHERE sequence = ?", (s,))
            self.db.execute("DELETE FROM replays WHERE sequence = ?", (s,))
            self.db.execute("DELETE FROM sequences WHERE sequence = ?", (s,))
        self.db.execute("DELETE FROM replays WHERE created < ?", (before,))
        return n + len(done)

    def counts(self) -> dict[str, int]:
        out = {"messages": int(self.db.execute("SELECT COUNT(*) FROM messages").fetchone()[0])}
        for status, n in self.db.execute("SELECT status, COUNT(*) FROM sequences GROUP BY status"):
            out[f"sequences_{status.lower()}"] = int(n)
        return out
