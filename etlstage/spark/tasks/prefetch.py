"""A stage's jobs cut ahead in a thread of their own, so that its conversation never waits
for its input while its worker has answers to read.

A sink task drives its T-stages and its L-stage in one Python process, each feeding the
next (:mod:`etlstage.spark.tasks.sink`).  Pulled in turn in one thread, a stage waiting
for its input — the T in front confirming its answers, the driver line serving the spool
— left its own worker's answers unread meanwhile: read late, they look slow, and a
worker's settle time is twice its slowest recent answer (:func:`policy.settle_time`), so
every quiet check grew with the wait, up to ``MAX_SETTLE``.  Measured before this
(10⁷ × 100 B, one partition): 244 quiet checks, every one in doubt (answers a few ms apart),
7–8 s of a task's 20–26 s, and stalls of 3–4 s with both cores idle.

Here the upstream runs in a thread (the upstream stage's whole conversation with it) and
hands over whole jobs; :meth:`Prefetched.take` with ``wait=False`` says when none has come,
and the conversation reads its worker instead.  Each worker is still driven by one thread
only.  A thread is left only where it can be: when the consumer stops early it is told
to stop and waited for; it closes its iterator at its next item, where an upstream
conversation stands between jobs with nothing outstanding (its answers just confirmed).

How much may wait cut is ``DEPTH`` jobs, or up to ``max_bytes`` of them.  An upstream
T hands its results over in bursts, all it confirmed at once (up to its
``replay_bytes``), and while one waits for room here its conversation feeds its worker
nothing.  With room for a few jobs only, the T and the stage behind it took turns, each
idle while the other worked: sampled (2·10⁷ × 100 B, one partition) the task's T, L and
relaying together kept one core of two busy.  The sink gives each stage room for two of
its upstream's bursts (:func:`burst_room`).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

DEPTH = 4  # jobs cut ahead of the conversation, whatever their size
MAX_JOBS = 4096  # ...and at most this many however small (single requests of a few bytes)


class NotReady:
    """:meth:`Prefetched.take` without waiting, and no job has come yet."""


NOT_READY = NotReady()


class _End:
    pass


class _Raised:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Jobs(Generic[T]):
    """A conversation's jobs, taken one at a time: here straight from the iterator."""

    def __init__(self, items: Iterator[T]) -> None:
        self._items = items

    def take(self, wait: bool = True) -> T | NotReady | None:
        """The next job (None: no more)."""
        return next(self._items, None)

    def close(self) -> None:
        pass


class Prefetched(Jobs[T]):
    """The jobs of ``items``, pulled in a thread of their own (see the module's text):
    ``depth`` jobs may wait, or more while they hold less than ``max_bytes`` (``size``)."""

    def __init__(
        self,
        items: Iterator[T],
        name: str,
        depth: int = DEPTH,
        max_bytes: int = 0,
        size: Callable[[T], int] = lambda item: 0,
    ) -> None:
        super().__init__(items)
        self._depth, self._max_bytes, self._size = depth, max_bytes, size
        self._handed: collections.deque[tuple[T | _End | _Raised, int]] = collections.deque()
        self._bytes = 0  # of the jobs waiting in _handed
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._ended = False
        self._thread = threading.Thread(target=self._pull, name=f"jobs of {name}", daemon=True)
        self._thread.start()

    def _room(self) -> bool:
        waiting = len(self._handed)
        return waiting < self._depth or (self._bytes < self._max_bytes and waiting < MAX_JOBS)

    def _put(self, item: T | _End | _Raised, size: int = 0) -> bool:
        with self._changed:
            while not self._room():
                if self._stop.is_set():
                    return False
                self._changed.wait(0.1)
            if self._stop.is_set():
                return False
            self._handed.append((item, size))
            self._bytes += size
            self._changed.notify_all()
            return True

    def _pull(self) -> None:
        try:
            for item in self._items:
                if not self._put(item, self._size(item)):
                    break
            else:
                self._put(_End())
        except BaseException as exc:  # raised again in the consumer's thread, as it was raised
            self._put(_Raised(exc))
        finally:
            close = getattr(self._items, "close", None)
            if close is not None:
                close()

    def take(self, wait: bool = True) -> T | NotReady | None:
        """The next job; None when there are no more; :data:`NOT_READY` when ``wait`` is
        false and none has come yet.  An exception raised upstream is raised here."""
        if self._ended:
            return None
        with self._changed:
            while not self._handed:
                if not wait:
                    return NOT_READY
                self._changed.wait()
            item, size = self._handed.popleft()
            self._bytes -= size
            self._changed.notify_all()
        if isinstance(item, _End):
            self._ended = True
            return None
        if isinstance(item, _Raised):
            self._ended = True
            raise item.exc
        return item

    def close(self) -> None:
        """Stop pulling and wait for the thread (it stops at its next job)."""
        self._stop.set()
        with self._changed:
            self._changed.notify_all()
        self._thread.join()


def burst_room(upstream_replay_bytes: int) -> int:
    """Bytes a stage's input may hold cut ahead: two of its upstream's bursts, so that the
    upstream hands one over while the stage still works through the one before."""
    return 2 * upstream_replay_bytes


__all__ = ["NOT_READY", "Jobs", "NotReady", "Prefetched", "burst_room"]
