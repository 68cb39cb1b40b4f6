#!/usr/bin/env python3
"""batches.py - an idempotent etlstage L-worker with the Python SDK: one file per batch.

Usage: ``python batches.py OUT_DIR``, on a stage with ``mode: batch`` and ``batch_id: true``.

Each batch is written to ``OUT_DIR/batch-<id>.txt`` (one message a line) by
``FileSink``: a temporary file, fsynced, renamed, the folder fsynced. A batch the
supervisor sends again (this worker died after its commit and before its EOP, a
time-out) comes with the id it had, finds its file there, and is not written twice.
``cat OUT_DIR/batch-*.txt`` is everything loaded, each message once.
"""

from __future__ import annotations

import sys

from etlstage.worker import Loader, main
from etlstage.worker.idempotent import FileSink


class Batches(Loader):
    def __init__(self, folder: str) -> None:
        self.folder = folder

    def setup(self) -> None:
        self.sink = FileSink(self.folder)

    def load(self, messages: list[bytes]) -> None:
        self.sink.commit(self.batch_id, messages)  # False: committed before, skipped

    def report(self) -> dict[str, object]:
        return {"output": self.folder}  # where the data went: the run's summary says so


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: batches.py OUT_DIR")
    main(Batches(sys.argv[1]), app="batches")
