"""The durability each SQLite store is documented to have (etlstage/state/sqlite.py): FULL
where a commit must survive a power cut, NORMAL where a lost last commit is redone; WAL."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from etlstage_workers.kcl.store import CheckpointStore
from etlstage_workers.rdss.ldr import LocalDataRepository
from etlstage_workers.spark.keystore import KeyStore

from etlstage.state.store import StateStore

FULL, NORMAL = 2, 1  # PRAGMA synchronous values


def _settings(db: sqlite3.Connection) -> tuple[int, str]:
    return db.execute("PRAGMA synchronous").fetchone()[0], db.execute("PRAGMA journal_mode").fetchone()[0]


def test_the_state_store_commits_offsets_durably(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    try:
        assert _settings(store.db) == (FULL, "wal")
    finally:
        store.close()


def test_the_stock_workers_stores_have_their_documented_durability(tmp_path: Path) -> None:
    ldr = LocalDataRepository(tmp_path / "ldr.db")
    keys = KeyStore(str(tmp_path / "keys.db"))
    claims = CheckpointStore(str(tmp_path / "kcl" / "cp.db"), "s")
    try:
        assert _settings(ldr.db) == (FULL, "wal")  # the LDR: what was received is never lost
        assert _settings(keys.db) == (FULL, "wal")  # the sink's key index: its commit acknowledges a batch
        assert _settings(claims._db) == (NORMAL, "wal")  # KCL checkpoints: a lost last one is read again
    finally:
        ldr.close()
        claims._db.close()
        keys.db.close()
