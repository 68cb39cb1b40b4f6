#!/usr/bin/env python3
"""append.py - an etlstage L-worker with the Python SDK: appends each message as a line.

Usage: ``python append.py OUT_FILE``

Modes: single, batch supervisor-driven, batch worker-driven (BNC).  Each batch is
appended in one write and fsync'ed before ``load`` returns: returning is what tells the
SDK to write EOP, and EOP is the supervisor's proof that the batch is durable.

On a stage with ``batch_id: true`` it loads exactly once: the SDK's ``AppendSink``
records each batch's id beside the file once its data is durable, skips a batch sent again
with a recorded id, and cuts off, when it starts, a batch appended but never recorded.
Without batch ids, a replay after a crash may append a batch twice (at-least-once).
"""

from __future__ import annotations

import logging
import os
import sys

from etlstage.worker import Loader, main
from etlstage.worker.idempotent import AppendSink

log = logging.getLogger("append")


class Append(Loader):
    def __init__(self, path: str) -> None:
        self.path = path
        self.sink: AppendSink | None = None

    def setup(self) -> None:
        if self.scenario.batch_id:  # exactly once: each batch's id recorded after its data
            self.sink = AppendSink(self.path)
            log.info("loading into %s, each batch once by its id (journal %s)", self.path, self.sink.journal)
            return
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        log.info("loading into %s", self.path)

    def load(self, messages: list[bytes]) -> None:
        if self.sink is not None:
            self.sink.commit(self.batch_id, messages)  # False: loaded before, skipped
            return
        data = b"".join(m + b"\n" for m in messages)
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]
        os.fsync(self.fd)

    def report(self) -> dict[str, object]:
        return {"output": self.path}  # where the data went: the run's summary says so

    def teardown(self) -> None:
        if self.sink is not None:
            self.sink.close()
        elif hasattr(self, "fd"):
            os.close(self.fd)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: append.py OUT_FILE")
    main(Append(sys.argv[1]), app="append")
