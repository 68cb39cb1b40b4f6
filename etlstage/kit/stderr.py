"""A worker's stderr, relayed line by line to the log, within bounds (both engines).

A worker may write anything to stderr, at any rate: one that floods it (a loop printing a
warning per record) must not slow the run nor fill the disk with the log.  So a line
longer than :data:`MAX_LINE` bytes is cut, saying how much was cut, and past
:data:`LINES_PER_SECOND` lines in a second the rest of that second's lines are counted,
not shown; one line then says how many were left out and how many bytes they held.
Counting the lines left out is a ``bytes.count`` over each chunk, so a flood costs little.

Every line shown is escaped (``escape_controls``: a worker cannot forge a log line or
drive the terminal) and kept in the worker's stderr tail, for its failure report.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

from etlstage.logs import escape_controls

MAX_LINE = 8192  # bytes of a line shown; the rest is counted
LINES_PER_SECOND = 200  # lines shown per second and worker; the rest is counted
WINDOW = 1.0


class StderrRelay:
    """Feed it a worker's stderr chunks; it calls ``emit(text)`` for each line to show."""

    def __init__(
        self,
        tail: collections.deque[str],
        emit: Callable[[str], None],
        *,
        max_line: int = MAX_LINE,
        per_second: int = LINES_PER_SECOND,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tail = tail
        self.emit = emit
        self.max_line = max_line
        self.per_second = per_second
        self.clock = clock
        self._line = b""  # the line begun, up to max_line bytes
        self._cut = 0  # bytes of it past max_line
        self._window = clock()
        self._shown = 0  # lines shown in this window
        self._dropped = 0  # lines left out in this window
        self._dropped_bytes = 0
        self.dropped_total = 0  # over the worker's life, for tests and reports

    def feed(self, data: bytes) -> None:
        self._roll(self.clock())
        start, n = 0, len(data)
        while start < n:
            if self._shown >= self.per_second:  # nothing more shown this second: count the rest in bulk
                last = data.rfind(b"\n", start)
                if last < 0:
                    self._add(data, start, n)
                    return
                lines = data.count(b"\n", start, last + 1)
                self._dropped += lines
                self.dropped_total += lines
                self._dropped_bytes += last + 1 - start + len(self._line) + self._cut  # newlines included
                self._line, self._cut = b"", 0
                start = last + 1
                continue
            nl = data.find(b"\n", start)
            if nl < 0:
                self._add(data, start, n)
                return
            self._add(data, start, nl)
            self._finish()
            start = nl + 1

    def close(self) -> None:
        """The pipe closed: show the last line if it had no end, and what was left out."""
        if self._line or self._cut:
            if self._shown >= self.per_second:
                self._dropped += 1
                self.dropped_total += 1
                self._dropped_bytes += len(self._line) + self._cut
                self._line, self._cut = b"", 0
            else:
                self._finish()
        self._summary()

    def _add(self, data: bytes, start: int, end: int) -> None:
        room = self.max_line - len(self._line)
        take = min(end - start, max(room, 0))
        if take:
            self._line += data[start : start + take]
        self._cut += end - start - take

    def _finish(self) -> None:
        text = escape_controls(self._line.decode("utf-8", "replace").rstrip("\r"))
        if self._cut:
            text += f" ... ({self._cut:,} more bytes of this line not shown)"
        self._line, self._cut = b"", 0
        self._shown += 1
        self.tail.append(text)
        self.emit(text)

    def _roll(self, now: float) -> None:
        if now - self._window >= WINDOW:
            self._summary()
            self._window, self._shown = now, 0

    def _summary(self) -> None:
        if self._dropped:
            text = (
                f"({self._dropped:,} stderr line(s), {self._dropped_bytes:,} bytes, not shown: "
                f"more than {self.per_second} lines a second)"
            )
            self.tail.append(text)
            self.emit(text)
            self._dropped = self._dropped_bytes = 0
