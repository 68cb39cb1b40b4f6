"""How each run ended — end time, exit status, error — for ``etlstage status`` after the run.

``etlstage run`` (either engine) calls :meth:`RunRecorder.end` with its exit status; the
error is the last ERROR record logged during the run (the headline the operator saw).
Kept in a table of its own in the state store, one row per run, the newest shown.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from typing import Any

from etlstage.errors import EtlstageError
from etlstage.redact import redact_text
from etlstage.state.store import StateStore

log = logging.getLogger("etlstage.state")

TABLE = """
CREATE TABLE IF NOT EXISTS run_ends (
    pid INTEGER NOT NULL,
    engine TEXT NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL NOT NULL,
    exit_status INTEGER NOT NULL,
    error TEXT                        -- the last error logged, when the run failed
);
"""
MAX_ERROR = 4000  # characters of the error kept: its headline and first lines
KEEP = 100  # rows kept


def outcome(exit_status: int) -> str:
    """The exit status in words, as ``etlstage run`` documents it."""
    return {0: "done", 1: "failed", 2: "refused: configuration or state"}.get(exit_status, "ended")


class _LastError(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.message: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.message = record.getMessage()
        except Exception:  # a record that does not format is not worth failing the run for
            pass


class RunRecorder:
    """Started when a run starts; :meth:`end` records how it ended and returns its exit status."""

    def __init__(self, state_dir: str, engine: str) -> None:
        self.state_dir = state_dir
        self.engine = engine
        self.started_at = time.time()
        self._errors = _LastError()
        logging.getLogger().addHandler(self._errors)

    def end(self, exit_status: int) -> int:
        logging.getLogger().removeHandler(self._errors)
        error = self._errors.message if exit_status != 0 else None
        try:
            store = StateStore(self.state_dir)
            try:
                record_end(store, self.engine, self.started_at, exit_status, error)
            finally:
                store.close()
        except (EtlstageError, OSError) as exc:  # the run's own outcome stands; say why it is not kept
            log.warning("how this run ended is not recorded in %s: %s", self.state_dir, exc)
        return exit_status


def record_end(
    store: StateStore, engine: str, started_at: float, exit_status: int, error: str | None, pid: int | None = None
) -> None:
    with store.tx() as db:
        db.execute(TABLE)
        db.execute(
            "INSERT INTO run_ends(pid, engine, started_at, ended_at, exit_status, error) VALUES (?,?,?,?,?,?)",
            (
                pid or os.getpid(),
                engine,
                started_at,
                time.time(),
                exit_status,
                redact_text(error)[:MAX_ERROR] if error else None,
            ),
        )
        db.execute("DELETE FROM run_ends WHERE rowid <= (SELECT MAX(rowid) FROM run_ends) - ?", (KEEP,))


def last_run(store: StateStore) -> dict[str, Any] | None:
    """The newest run's end as a JSON-ready document, or None when no run has ended."""
    try:
        row = store.db.execute(
            "SELECT pid, engine, started_at, ended_at, exit_status, error FROM run_ends ORDER BY rowid DESC LIMIT 1"
        ).fetchone()
    except sqlite3.OperationalError as exc:  # no table yet: no run has ended since it was added
        if "no such table" in str(exc):
            return None
        raise
    if row is None:
        return None
    pid, engine, started_at, ended_at, status, error = row
    return {
        "pid": pid,
        "engine": engine,
        "started_at": started_at,
        "ended_at": ended_at,
        "seconds": round(ended_at - started_at, 1),
        "exit_status": status,
        "outcome": outcome(status),
        "error": error,
    }
