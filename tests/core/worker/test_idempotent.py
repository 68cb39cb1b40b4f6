"""The idempotent-loader helpers: a batch is committed whole with its id, once."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from etlstage.worker.idempotent import NO_ID, AppendSink, FileSink, SQLiteSink


def test_file_sink_commits_a_batch_once_and_skips_its_id_after(tmp_path: Path) -> None:
    sink = FileSink(tmp_path / "out")
    assert sink.commit("a" * 32, [b"1", b"2"])
    assert not sink.commit("a" * 32, [b"1", b"2"])  # sent again: skipped
    assert sink.commit("b" * 32, [b"3"])
    assert sink.lines() == [b"1", b"2", b"3"]
    assert sorted(os.listdir(tmp_path / "out")) == [f"batch-{'a' * 32}.txt", f"batch-{'b' * 32}.txt"]


def test_file_sink_leaves_nothing_behind_when_the_write_fails(tmp_path: Path) -> None:
    sink = FileSink(tmp_path / "out")
    with pytest.raises(TypeError):
        sink.commit("c" * 32, [b"ok", "not bytes"])  # type: ignore[list-item]
    assert os.listdir(tmp_path / "out") == [] and not sink.committed("c" * 32)


def test_sqlite_sink_records_the_id_in_the_rows_transaction(tmp_path: Path) -> None:
    sink = SQLiteSink(tmp_path / "rows.db")
    sink.db.execute("CREATE TABLE rows (line TEXT)")

    def write(db: sqlite3.Connection, messages: list[bytes]) -> None:
        db.executemany("INSERT INTO rows VALUES (?)", [(m.decode(),) for m in messages])

    assert sink.commit("a" * 32, [b"x", b"y"], write)
    assert not sink.commit("a" * 32, [b"x", b"y"], write)

    def failing(db: sqlite3.Connection, messages: list[bytes]) -> None:
        write(db, messages)
        raise RuntimeError("the database went away")

    with pytest.raises(RuntimeError):
        sink.commit("b" * 32, [b"z"], failing)
    assert not sink.committed("b" * 32)  # rolled back: rows and id together
    assert [r[0] for r in sink.db.execute("SELECT line FROM rows")] == ["x", "y"]
    assert sink.commit("b" * 32, [b"z"], write)
    assert [r[0] for r in sink.db.execute("SELECT line FROM rows ORDER BY line")] == ["x", "y", "z"]


@pytest.mark.parametrize("ident", [None, ""])
def test_a_batch_without_an_id_is_refused_naming_the_stage_key(tmp_path: Path, ident: str | None) -> None:
    with pytest.raises(ValueError) as err:
        FileSink(tmp_path).commit(ident, [b"1"])
    assert str(err.value) == NO_ID and "batch_id: true" in NO_ID
    with pytest.raises(ValueError):
        SQLiteSink(tmp_path / "db").commit(ident, [b"1"], lambda db, ms: None)


def test_the_harness_gives_a_loader_batch_ids_the_same_for_the_same_batches(tmp_path: Path) -> None:
    from etlstage.testing.harness import StageHarness
    from etlstage.worker import Loader

    class Files(Loader):
        def setup(self) -> None:
            self.sink = FileSink(tmp_path / "out")

        def load(self, messages: list[bytes]) -> None:
            self.sink.commit(self.batch_id, messages)

    h = StageHarness(str(tmp_path))
    kw = {"type": "L", "mode": "batch", "batch_size": 2, "batch_id": True}
    first = h.run(Files(), inputs=[b"a", b"b", b"c"], **kw)
    assert first.inputs == [[b"a", b"b"], [b"c"]] and len(set(first.ids)) == 2  # the header is not a message
    again = h.run(Files(), inputs=[b"a", b"b", b"c"], **kw)  # sent again: the same ids, nothing loaded twice
    assert again.ids == first.ids
    other = h.run(Files(), inputs=[b"a", b"x", b"c"], **kw)
    assert other.ids[0] != first.ids[0] and other.ids[1] == first.ids[1]
    assert sorted(FileSink(tmp_path / "out").lines()) == [b"a", b"a", b"b", b"c", b"x"]


A, B, C = "a" * 32, "b" * 32, "c" * 32


def test_append_sink_appends_a_batch_once_and_skips_its_id_after_a_restart(tmp_path: Path) -> None:
    out = tmp_path / "out" / "lines.txt"
    sink = AppendSink(out)
    assert sink.commit(A, [b"1", b"2"])
    assert not sink.commit(A, [b"1", b"2"])  # sent again: skipped
    sink.close()
    again = AppendSink(out)  # a new process
    assert again.committed(A) and not again.commit(A, [b"1", b"2"])
    assert again.commit(B, [b"3"])
    again.close()
    assert out.read_bytes() == b"1\n2\n3\n"
    assert (tmp_path / "out" / "lines.txt.batches").read_bytes() == f"{A} 4\n{B} 6\n".encode()


def test_append_sink_cuts_off_a_batch_appended_but_never_recorded(tmp_path: Path) -> None:
    """The process died between the data and the journal line (or in the middle of either):
    the batch was not acknowledged, so it comes again and must be appended once."""
    out = tmp_path / "lines.txt"
    sink = AppendSink(out)
    assert sink.commit(A, [b"1"])
    sink.close()
    with open(out, "ab") as f:
        f.write(b"2\n3")  # B's data, part of it, then the crash
    with open(tmp_path / "lines.txt.batches", "ab") as f:
        f.write(f"{B} 6".encode())  # a torn journal line (no newline): never counted
    again = AppendSink(out)
    assert not again.committed(B)
    assert again.commit(B, [b"2", b"3"])
    again.close()
    assert out.read_bytes() == b"1\n2\n3\n"
    assert (tmp_path / "lines.txt.batches").read_bytes() == f"{A} 2\n{B} 6\n".encode()


def test_append_sink_refuses_a_file_cut_shorter_than_its_journal(tmp_path: Path) -> None:
    out = tmp_path / "lines.txt"
    sink = AppendSink(out)
    sink.commit(A, [b"1", b"2"])
    sink.close()
    out.write_bytes(b"1\n")  # someone cut it: A's id would skip data the file lacks
    with pytest.raises(RuntimeError, match=r"holds 2 bytes, but its journal .* records 4"):
        AppendSink(out)


def test_append_sink_allows_one_process_per_file(tmp_path: Path) -> None:
    first = AppendSink(tmp_path / "lines.txt")
    with pytest.raises(RuntimeError, match="another process"):
        AppendSink(tmp_path / "lines.txt")
    first.close()
    AppendSink(tmp_path / "lines.txt").close()
    with pytest.raises(ValueError, match="batch_id: true"):
        AppendSink(tmp_path / "other.txt").commit(None, [b"x"])


def test_append_sink_takes_back_a_write_cut_short(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed append (a full disk) leaves nothing of its batch for the next one to follow."""
    sink = AppendSink(tmp_path / "lines.txt")
    assert sink.commit(A, [b"1"])
    real_write = os.write

    def half_then_full(fd: int, data: bytes | memoryview) -> int:
        if fd == sink.fd and len(data) > 2:
            return real_write(fd, bytes(data[:2]))  # part of the batch, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(OSError, match="No space"):
        sink.commit(B, [b"2", b"3"])
    monkeypatch.setattr(os, "write", real_write)
    assert sink.commit(C, [b"4"])
    sink.close()
    assert (tmp_path / "lines.txt").read_bytes() == b"1\n4\n"
