#!/usr/bin/env python3
"""lines.py - an etlstage E-worker with the Python SDK: each line of a file is a message.

Usage: ``python lines.py FILE`` (plain mode: the whole file, then it exits 0).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

from etlstage.worker import Extractor, Request, main


class Lines(Extractor):
    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def extract(self, request: Request | None) -> Iterator[bytes]:
        with self.path.open("rb") as f:
            for line in f:
                yield line.rstrip(b"\r\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python lines.py FILE")
    main(Lines(sys.argv[1]), app="lines")
