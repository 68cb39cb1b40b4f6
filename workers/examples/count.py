#!/usr/bin/env python3
"""count.py - an etlstage E-worker with the Python SDK: emits the numbers 1..N.

Usage: ``python count.py N [--per-cycle K]``

- plain mode: prints ``1`` … ``N``, one message each, and exits 0.
- cyclic mode, worker-managed offsets (request = empty message): each request is answered
  with the next K numbers (default 3), then empty cycles once N is reached.  The offset
  (the last number emitted in a *done* window) lives in ``$ETLSTAGE_STATE_DIR/count-<instance>.offset``.
  It is committed when the NEXT request arrives - that request is the supervisor's word
  that the previous window was loaded - and never on stdin EOF (EOF may mean the
  supervisor died; the uncommitted cycle is then emitted again on the next run).
- cyclic mode, supervisor-managed offsets (request = ``{"start": S, "end": E}``): emits
  the numbers S+1 … E (capped at N); the supervisor keeps the offsets.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from etlstage.worker import Extractor, Request, main

log = logging.getLogger("count")


class Count(Extractor):
    def __init__(self, total: int, per_cycle: int) -> None:
        self.total = total
        self.per_cycle = per_cycle
        self.committed = 0  # last number of the last done window
        self.emitted = 0  # last number emitted (maybe not yet loaded downstream)

    def setup(self) -> None:
        state_dir = self.scenario.state_dir or "."
        self.offset_file = Path(state_dir) / f"count-{self.scenario.instance}.offset"
        if self.offset_file.exists():
            self.committed = int(self.offset_file.read_text().strip() or 0)
        self.emitted = self.committed
        log.info("total=%d, resuming after %d", self.total, self.committed)

    def extract(self, request: Request | None) -> Iterator[bytes]:
        if request is None:  # plain mode: the whole run
            first, last = 1, self.total
        elif request.start is not None or request.end is not None:  # supervisor offsets
            first, last = _offset(request, "start") + 1, min(_offset(request, "end"), self.total)
        else:  # worker offsets: continue after what was emitted
            first, last = self.emitted + 1, min(self.emitted + self.per_cycle, self.total)
            self.emitted = max(self.emitted, last)
        for n in range(first, last + 1):
            yield str(n).encode()

    def on_window_done(self, request: Request) -> None:
        if self.emitted == self.committed:
            return
        # write-then-rename: a crash leaves the old offset or the new one, never half a file
        tmp = self.offset_file.with_suffix(".tmp")
        with open(tmp, "w") as f:
            f.write(f"{self.emitted}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.offset_file)
        self.committed = self.emitted
        log.info("committed offset %d", self.committed)


def _offset(request: Request, name: str) -> int:
    value = getattr(request, name)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    raise ValueError(f"request {request.raw!r}: {name!r} must be an integer (a counter offset policy), got {value!r}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("total", type=int, help="emit the numbers 1..TOTAL")
    p.add_argument("--per-cycle", type=int, default=3, help="numbers per cycle (cyclic, worker offsets)")
    args = p.parse_args()
    if args.total < 0 or args.per_cycle < 1:
        p.error(f"expected TOTAL >= 0 and --per-cycle >= 1, got {args.total} and {args.per_cycle}")
    return args


if __name__ == "__main__":
    a = parse_args()
    main(Count(a.total, a.per_cycle), app="count")
