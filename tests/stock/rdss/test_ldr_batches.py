"""The LDR is written once per batch: one transaction, committed before process() returns
(so before the SDK answers EOP), and nothing of a batch that failed half-way."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from etlstage_workers.rdss.worker import LDR_FILE, Options, RdssTransformer

from .conftest import compact, fresh, split_message


def _worker(state: Path) -> RdssTransformer:
    t = RdssTransformer(Options(state_dir=str(state)))
    t.setup()
    return t


def _rows(state: Path, table: str) -> int:
    db = sqlite3.connect(state / LDR_FILE)
    try:
        return int(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    finally:
        db.close()


def test_a_batch_is_one_transaction_committed_before_process_returns(state: Path) -> None:
    t = _worker(state)
    statements: list[str] = []
    t.ldr.db.set_trace_callback(statements.append)
    parts = split_message(fresh(), 3)
    batch = [compact(fresh()) for _ in range(300)] + parts[:2] + [b"{not json"]
    out = t.process(batch)
    assert len(out) == 301  # 300 valid, 2 parts stored (nothing yet), 1 GENERR007
    assert [s for s in statements if s in ("BEGIN IMMEDIATE", "COMMIT")] == ["BEGIN IMMEDIATE", "COMMIT"]
    assert not t.ldr.db.in_transaction
    # Another connection sees the whole batch as soon as process() has returned.
    assert _rows(state, "messages") == 303 and _rows(state, "parts") == 2
    t.teardown()


def test_a_batch_that_fails_half_way_leaves_nothing_and_its_replay_is_processed_whole(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _worker(state)
    parts = split_message(fresh(), 2)
    batch = [compact(fresh()), parts[0], parts[1], compact(fresh())]
    add = t.reassembler.add
    calls = 0

    def failing_add(*args: Any) -> list[bytes]:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError("disk full")
        return add(*args)

    monkeypatch.setattr(t.reassembler, "add", failing_add)
    with pytest.raises(OSError, match="disk full"):
        t.process(batch)
    assert _rows(state, "messages") == 0 and _rows(state, "parts") == 0 and _rows(state, "sequences") == 0
    monkeypatch.setattr(t.reassembler, "add", add)
    out = t.process(batch)  # the supervisor sends the unanswered batch again
    assert len(out) == 3  # two valid messages and the reassembled sequence: nothing swallowed
    assert _rows(state, "messages") == 4 and _rows(state, "parts") == 2
    t.teardown()
