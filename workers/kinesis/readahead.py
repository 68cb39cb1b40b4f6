"""The next cycle, read while the previous window is loaded: bounded, committed by nobody.

A cyclic extractor under worker-managed offsets gets its next request only when the
previous window is loaded.  Reading Kinesis only then makes the pipeline take turns:
read, then transform and load, then read again.  :class:`ReadAhead` reads the next
cycle's records in a background thread meanwhile and hands them out when the request
comes.  It never commits: the extractor commits a cycle's positions when the request
*after* it arrives, exactly as without read-ahead, so a crash loses nothing and the
records held here are simply read again.

A cycle is answered when one of these holds (checked when the request arrives, and again
after every read round while the request waits):

- the buffer holds ``max_records`` records (reading pauses there: the memory bound);
- it holds records and every readable shard is caught up (nothing more to read now);
- it holds records and ``max_seconds`` have passed since the previous cycle was handed out
  (a backlog does not hold a window open for longer);
- a read round that began after the request ended caught up, or past ``max_seconds``
  (so an empty cycle means "nothing to read now", which ends a ``--once`` run).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from etlstage_workers.kinesis.store import Commit

log = logging.getLogger("etlstage.kinesis")


@dataclass
class Round:
    """What one read round (one GetRecords per readable shard) gave."""

    messages: list[bytes]
    commits: dict[str, Commit]  # shard -> position of its last message in this round (or its end)
    caught_up: bool  # every readable shard is at its tip (or none is readable)


@dataclass
class Cycle:
    """The messages handed out for one request, and the positions that commit them."""

    messages: list[bytes] = field(default_factory=list)
    commits: dict[str, Commit] = field(default_factory=dict)


def shares(room: int, shards: int, limit: int) -> list[int]:
    """Records to ask of each shard in a round: ``room`` split evenly, at most ``limit`` each.

    >>> shares(10, 3, 10000), shares(2, 3, 10000), shares(50000, 2, 10000)
    ([4, 3, 3], [1, 1, 0], [10000, 10000])
    """
    base, extra = divmod(max(room, 0), shards)
    return [min(limit, base + (1 if i < extra else 0)) for i in range(shards)]


class ReadAhead:
    """Runs ``read_round(room)`` in a thread while the buffer has room; :meth:`take` hands out a cycle.

    ``eager``: read ahead while no request waits (the point of this class); False reads only
    while a request waits, as an extractor without read-ahead does.
    """

    def __init__(
        self,
        read_round: Callable[[int], Round],
        *,
        max_records: int,
        max_seconds: float,
        idle_sleep: float,
        eager: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read_round = read_round
        self.max_records = max_records
        self.max_seconds = max_seconds
        self.idle_sleep = idle_sleep
        self.eager = eager
        self._clock = clock
        self._cond = threading.Condition()
        self._buffer = Cycle()
        self._caught_up = False
        self._last_round_began = float("-inf")  # start time of the last round that finished
        self._since = clock()  # when the previous cycle was handed out
        self._waiting = False
        self._closed = False
        self._error: BaseException | None = None
        self.peak = 0  # most records held at once, for the report
        self._thread = threading.Thread(target=self._run, name="kinesis-read-ahead", daemon=True)
        self._thread.start()

    @property
    def held(self) -> int:
        with self._cond:
            return len(self._buffer.messages)

    def take(self) -> Cycle:
        """The next cycle, once it is ready (see the module's docstring); re-raises a reader failure."""
        with self._cond:
            asked = self._clock()
            self._waiting = True
            self._cond.notify_all()
            try:
                while True:
                    if self._error is not None:
                        raise self._error
                    held = len(self._buffer.messages)
                    waited = self._clock() - self._since
                    settled = self._caught_up or waited >= self.max_seconds
                    fresh = self._last_round_began >= asked
                    if held >= self.max_records or (settled and (held or fresh)):
                        break
                    self._cond.wait(None if waited >= self.max_seconds else self.max_seconds - waited)
            finally:
                self._waiting = False
            cycle, self._buffer = self._buffer, Cycle()
            self._since = self._clock()
            self._cond.notify_all()  # room again: the reader goes on
            return cycle

    def close(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)

    # --- the reader thread ---------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._closed and (
                        len(self._buffer.messages) >= self.max_records or not (self.eager or self._waiting)
                    ):
                        self._cond.wait()
                    if self._closed:
                        return
                    room = self.max_records - len(self._buffer.messages)
                began = self._clock()
                got = self._read_round(room)
                with self._cond:
                    self._buffer.messages += got.messages
                    self._buffer.commits.update(got.commits)
                    self.peak = max(self.peak, len(self._buffer.messages))
                    self._caught_up = got.caught_up
                    self._last_round_began = began
                    self._cond.notify_all()
                    if got.caught_up and self.idle_sleep > 0:  # nothing more now: no busy polling
                        self._cond.wait_for(lambda: self._closed, self.idle_sleep)
        except BaseException as exc:  # handed to the request that comes next; nothing is committed
            log.error("reading ahead failed (the next request gets the error): %s", exc)
            with self._cond:
                self._error = exc
                self._cond.notify_all()
