#!/usr/bin/env python3
"""append.py - an etlstage L-worker with the Python SDK: appends each message as a line.

Usage: ``python append.py OUT_FILE``

Modes: single, batch supervisor-driven, batch worker-driven (BNC).  Each batch is
appended in one write and fsync'ed before ``load`` returns: returning is what tells the
SDK to write EOP, and EOP is the supervisor's proof that the batch is durable.  A replay
after a crash may append a batch twice (at-least-once); a sink that knows a key can load
idempotently instead.
"""

from __future__ import annotations

import logging
import os
import sys

from etlstage.worker import Loader, main

log = logging.getLogger("append")


class Append(Loader):
    def __init__(self, path: str) -> None:
        self.path = path

    def setup(self) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        log.info("loading into %s", self.path)

    def load(self, messages: list[bytes]) -> None:
        data = b"".join(m + b"\n" for m in messages)
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]
        os.fsync(self.fd)

    def report(self) -> dict[str, object]:
        return {"output": self.path}  # where the data went: the run's summary says so

    def teardown(self) -> None:
        os.close(self.fd)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: append.py OUT_FILE")
    main(Append(sys.argv[1]), app="append")
