"""The state store's windows and checkpoints on their own: what a run leaves open is read
back as it was written, and a commit closes its window and those before it."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from etlstage.errors import StateError
from etlstage.state.lastrun import RunRecorder
from etlstage.state.store import StateStore


def test_open_windows_are_read_back_with_their_numbers_and_requests(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    try:
        store.open_window("src#0", 3, {"start": 30, "end": 40})
        store.open_window("src#0", 4, {"start": 40, "end": 50})
        store.open_window("plain#0", 0, None)
        got = [(w.source, w.seq, w.request) for w in store.open_windows()]
        assert got == [
            ("plain#0", 0, None),
            ("src#0", 3, {"start": 30, "end": 40}),
            ("src#0", 4, {"start": 40, "end": 50}),
        ]

        store.commit("src#0", 3, 40, 10)  # window 3 done: it and those before it leave the list
        assert [(w.source, w.seq) for w in store.open_windows()] == [("plain#0", 0), ("src#0", 4)]
        assert store.committed("src#0") == (40, 4)
        store.commit("src#0", 4, 50, 7)
        assert store.committed("src#0") == (50, 5)
        [src] = [c for c in store.checkpoints() if c.source == "src#0"]
        assert src.messages == 17  # summed over the commits
        assert store.committed("never#0") == (None, 0)
    finally:
        store.close()


def test_dead_letters_are_found_by_number_stage_and_status(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    try:
        one = store.add_deadletter("t", 3, "crashed", b"a\nb\n", 2, 10)
        two = store.add_deadletter("sink", 1, "refused", b"c\n", 1, 10)
        got = store.deadletter(two)
        assert got is not None and (got.id, got.stage, got.inputs, got.messages) == (two, "sink", b"c\n", 1)
        assert store.deadletter(two + 100) is None
        assert [d.id for d in store.deadletters(stage="t")] == [one]
        assert store.set_deadletter_status([one], "replay") == 1
        assert [d.id for d in store.deadletters(status="replay")] == [one]
        assert store.deadletter_counts() == {"new": 1, "replay": 1}
        assert store.deadletter_stage_counts() == {"t": 1, "sink": 1}
    finally:
        store.close()


def test_the_heartbeat_finds_the_store_replaced_or_truncated_under_the_run(tmp_path: Path) -> None:
    """Each heartbeat looks: what is committed after the file changed would be lost."""
    for n, (damage, says) in enumerate(
        (
            (lambda p: os.replace(p.with_name("other.db"), p), "was replaced by another file during the run"),
            (lambda p: os.truncate(p, 0), "was truncated or overwritten during the run"),
        )
    ):
        store = StateStore(tmp_path / str(n) / "state")
        try:
            store.heartbeat({"ok": 1})
            (store.path.parent / "other.db").write_bytes(store.path.read_bytes())
            damage(store.path)
            with pytest.raises(StateError, match=says):
                store.heartbeat({"ok": 2})
        finally:
            store.close()


def test_recording_how_a_run_ended_leaves_no_file_open(tmp_path: Path) -> None:
    StateStore(tmp_path / "state").close()  # the run's store exists
    recorder = RunRecorder(str(tmp_path / "state"), "supervisor")
    before = set(os.listdir("/proc/self/fd"))
    assert recorder.end(0) == 0
    left = set(os.listdir("/proc/self/fd")) - before
    assert not left, left
    store = StateStore(tmp_path / "state")
    try:
        rows = store.db.execute("SELECT engine, exit_status FROM run_ends").fetchall()
    finally:
        store.close()
    assert rows == [("supervisor", 0)]


def test_a_message_set_aside_is_stored_under_the_number_the_log_line_gives(tmp_path, caplog) -> None:
    """The operator's one pointer to a dead letter is the log line: it names the stage, the
    count, the tries and the number `deadletter show` takes, and that number is the one
    stored."""
    store = StateStore(tmp_path / "state")
    try:
        store.set_aside("t", 2, "boom", b"a\nb\n", 2, 10)
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="etlstage"):
            ident = store.set_aside("t", 3, "bang", b"c\n", 1, 10)
        assert ident == 2
        assert [r.getMessage() for r in caplog.records] == [
            "stage 't': 1 message(s) failed 3 times; written to the dead-letter store as #2 (etlstage deadletter show stages.yaml 2)"
        ]
        (letter,) = [d for d in store.deadletters() if d.id == ident]
        assert (letter.stage, letter.attempts, letter.error, letter.inputs) == ("t", 3, "bang", b"c\n")
    finally:
        store.close()


def test_a_run_is_read_back_with_when_it_started_and_its_last_heartbeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``status`` shows both times: the first heartbeat sets when the run started, later
    ones move only the heartbeat and the progress document."""
    from etlstage.state import store as store_module

    clock = [1000.0]
    monkeypatch.setattr(store_module.time, "time", lambda: clock[0])
    store = StateStore(tmp_path / "state")
    try:
        store.heartbeat({"n": 1})
        clock[0] = 1060.0
        store.heartbeat({"n": 2})
        assert store.runs() == [(os.getpid(), 1000.0, 1060.0, {"n": 2})]
    finally:
        store.close()
