"""Batches a Loader finishes in the background, acknowledged in order.

A :class:`~etlstage.worker.base.Loader` may return a Future from ``load``: the batch is
then durable only when the future completes, and its EOP must wait for that — and for
every earlier batch's EOP, since replies are matched to requests by their order.
Meanwhile the SDK keeps reading stdin, so the next batch is parsed while this one is
written.  While batches are pending, the read waits on stdin *and* on their completion
(a self-pipe the futures' callbacks write to), so an acknowledgement never waits for
input that the supervisor will only send after it.
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, BinaryIO


class PendingAcks:
    def __init__(self, stdin: BinaryIO, acknowledge: Callable[[], None], flush: Callable[[], None]) -> None:
        """``acknowledge``: write one batch's report and EOP; ``flush``: send what was written."""
        self._acknowledge = acknowledge
        self._flush = flush
        self._queue: deque[Future[Any]] = deque()
        # Only an unbuffered stream can be waited on with select: a buffered one may hold
        # data the file descriptor no longer shows.  Others wait for each batch in turn.
        self._stdin_fd: int | None = None
        if isinstance(stdin, io.RawIOBase):
            with contextlib.suppress(OSError, ValueError):  # io.UnsupportedOperation: no descriptor
                self._stdin_fd = stdin.fileno()
        self._wake: tuple[int, int] | None = None
        self._wake_lock = threading.Lock()  # a callback never writes to a closed (reused) descriptor

    def add(self, future: Future[Any]) -> None:
        if self._wake is None:
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.set_blocking(w, False)
            self._wake = (r, w)
        self._queue.append(future)
        future.add_done_callback(self._on_done)

    def _on_done(self, _: Future[Any]) -> None:
        with self._wake_lock:
            if self._wake is None:
                return
            try:
                os.write(self._wake[1], b"\0")
            except BlockingIOError:  # the pipe is full: already woken
                pass

    def settle(self, keep: int | None = None) -> None:
        """Acknowledge the finished batches at the front of the queue.

        With ``keep``, first wait until at most ``keep`` batches are pending.  A batch
        whose future failed raises its error here, unacknowledged.
        """
        acknowledged = False
        while self._queue and (self._queue[0].done() or (keep is not None and len(self._queue) > keep)):
            self._queue[0].result()
            self._queue.popleft()
            self._acknowledge()
            acknowledged = True
        if acknowledged:
            self._flush()

    def wait_for_input(self) -> None:
        """Return when stdin has data (or is closed), acknowledging batches as they finish."""
        while self._queue:
            if self._stdin_fd is None or self._wake is None:
                self.settle(keep=0)
                return
            ready, _, _ = select.select([self._stdin_fd, self._wake[0]], [], [])
            if self._wake[0] in ready:
                try:
                    os.read(self._wake[0], 4096)
                except BlockingIOError:
                    pass
                self.settle()
            if self._stdin_fd in ready:
                return

    def close(self) -> None:
        with self._wake_lock:
            if self._wake is not None:
                for fd in self._wake:
                    os.close(fd)
                self._wake = None
