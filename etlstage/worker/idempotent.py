"""Idempotent loaders made easy: commit each batch with its id, skip an id committed before.

A stage with ``batch_id: true`` gives its loader each batch's id (:attr:`Loader.batch_id`):
the same whenever the same messages are sent again (after a loader crash, a time-out, a
stray EOP), never the same for other messages. Committing the id atomically with the
data makes loading exactly-once:

- :class:`FileSink`: each batch becomes one file named after its id, written to a
  temporary name, fsynced, renamed (and the folder fsynced): a file is there whole or
  not at all, and a batch whose file is there is not written again.
- :class:`SQLiteSink`: the batch's rows and its id go in one transaction; a batch whose
  id is recorded is not loaded again.
- :class:`AppendSink`: every batch appended to one file, each id recorded after its data
  in a journal beside it; opening the file cuts off what was appended but not recorded.

Each returns False for a batch it skipped, True for one it loaded.
"""

from __future__ import annotations

import fcntl
import os
import re
import sqlite3
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

NO_ID = (
    "this loader commits each batch with its id, but the batch came without one: "
    "give the stage `batch_id: true` (L-stage, mode: batch) in stages.yaml"
)


def _need(batch_id: str | None) -> str:
    if not batch_id:
        raise ValueError(NO_ID)
    return batch_id


class FileSink:
    """One file per batch in ``folder``: ``<prefix><batch id><suffix>``, the messages one
    per line (``separator`` after each)."""

    def __init__(
        self, folder: str | os.PathLike[str], prefix: str = "batch-", suffix: str = ".txt", separator: bytes = b"\n"
    ) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.prefix, self.suffix, self.separator = prefix, suffix, separator

    def path(self, batch_id: str) -> Path:
        return self.folder / f"{self.prefix}{batch_id}{self.suffix}"

    def committed(self, batch_id: str) -> bool:
        return self.path(batch_id).exists()

    def commit(self, batch_id: str | None, messages: Iterable[bytes]) -> bool:
        """Write the batch's file atomically; False (nothing written) if it is there already."""
        final = self.path(_need(batch_id))
        if final.exists():
            return False
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(b"".join(m + self.separator for m in messages))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself is durable
        finally:
            os.close(dir_fd)
        return True

    def lines(self) -> list[bytes]:
        """Every committed message (all files, by name): for checks and tests."""
        out: list[bytes] = []
        for p in sorted(self.folder.glob(f"{self.prefix}*{self.suffix}")):
            out.extend(p.read_bytes().split(self.separator)[:-1])
        return out


class SQLiteSink:
    """A SQLite database whose table ``etlstage_batches`` records each loaded batch's id in
    the same transaction as its rows."""

    LEDGER = "CREATE TABLE IF NOT EXISTS etlstage_batches (id TEXT PRIMARY KEY, messages INTEGER NOT NULL)"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)  # transactions are explicit
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute(self.LEDGER)

    def committed(self, batch_id: str) -> bool:
        return self.db.execute("SELECT 1 FROM etlstage_batches WHERE id = ?", (batch_id,)).fetchone() is not None

    def commit(
        self, batch_id: str | None, messages: list[bytes], write: Callable[[sqlite3.Connection, list[bytes]], None]
    ) -> bool:
        """``write(connection, messages)`` inserts the rows; it runs in one transaction with
        the id's record, and not at all when the id is recorded already (False)."""
        ident = _need(batch_id)
        self.db.execute("BEGIN IMMEDIATE")
        try:
            if self.committed(ident):
                self.db.execute("ROLLBACK")
                return False
            write(self.db, messages)
            self.db.execute("INSERT INTO etlstage_batches (id, messages) VALUES (?, ?)", (ident, len(messages)))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return True

    def close(self) -> None:
        self.db.close()


class AppendSink:
    """Appends each batch to one file (each message then ``separator``), exactly once by id.

    The journal ``<file>.batches`` gets a line ``<id> <the file's length after it>`` once a
    batch's data is durable; the batch is durable with that line. Opening the sink cuts
    the file back to the last recorded length: a batch appended but not recorded (the
    process died between) was not acknowledged either, so it comes again, and is appended
    once. A file shorter than its journal says is refused (someone cut it: the ids would
    skip data it no longer has). One process per file: a second is refused (a lock).
    """

    LINE = re.compile(rb"([0-9a-f]{32}) ([0-9]+)\n")

    def __init__(self, path: str | os.PathLike[str], separator: bytes = b"\n") -> None:
        self.path, self.separator = Path(path), separator
        self.journal = self.path.with_name(self.path.name + ".batches")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise RuntimeError(f"{self.path} is being loaded by another process: one loader per file") from None
        self.ids: set[str] = set()
        length, kept = 0, 0
        raw = self.journal.read_bytes() if self.journal.exists() else b""
        for m in self.LINE.finditer(raw):
            if m.start() != kept:
                break  # a torn line (the process died writing it): it and what follows never counted
            self.ids.add(m.group(1).decode())
            length, kept = int(m.group(2)), m.end()
        self.jfd = os.open(self.journal, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        os.truncate(self.journal, kept)
        size = os.fstat(self.fd).st_size
        if size < length:
            raise RuntimeError(
                f"{self.path} holds {size} bytes, but its journal {self.journal} records {length}: the file "
                "was cut, and batches the journal names are no longer in it (move both aside to start afresh)"
            )
        if size > length:
            os.truncate(self.path, length)  # appended, never recorded, never acknowledged
            os.fsync(self.fd)
        self.length = length

    def committed(self, batch_id: str) -> bool:
        return batch_id in self.ids

    def commit(self, batch_id: str | None, messages: Iterable[bytes]) -> bool:
        """Append the batch, then record its id: False (nothing written) if it is recorded."""
        ident = _need(batch_id)
        if ident in self.ids:
            return False
        data = memoryview(b"".join(m + self.separator for m in messages))
        try:
            while data:
                data = data[os.write(self.fd, data) :]
            os.fsync(self.fd)
        except BaseException:
            # a write cut short (a full disk): the next batch must not land after half of this one
            os.ftruncate(self.fd, self.length)
            raise
        self.length = os.fstat(self.fd).st_size
        os.write(self.jfd, b"%s %d\n" % (ident.encode(), self.length))
        os.fsync(self.jfd)
        self.ids.add(ident)
        return True

    def close(self) -> None:
        os.close(self.jfd)
        os.close(self.fd)


__all__ = ["NO_ID", "AppendSink", "FileSink", "SQLiteSink"]
