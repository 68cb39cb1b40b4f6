"""Write-ahead for worker-driven batches: what an engine writes before the worker's BNCs.

A worker-driven worker writes exactly one token after each message of its batch: a BNC
while the batch is short of ``batch_size``, its answer after the message that fills it
(or, once EOB closed a shorter batch, after EOB).  So a message need not wait for the
BNC of the one before: it waits in the worker's pipe, read in order, and the reply rules
count the BNCs as they come (:func:`etlstage.protocol.replies.bncs_due`: too many, or an
answer before all of them, is a protocol violation).  Both engines write a batch through
:class:`WriteAhead`, which says:

- how much more the batch may take (:meth:`WriteAhead.room`): never past its remaining
  size, so the worker finds in its pipe only messages of the batch it is answering (the
  next batch is written once it answered: one in flight); within ``batch_bytes``, and
  within ``replay_bytes`` beside any other input written and unanswered;
- when it is closed: by the message that fills it (no EOB), or by EOB, written right
  after the last message whether or not their BNCs came (:meth:`WriteAhead.close`).

A batch sent again after a failure is written the same way, its messages at once.

>>> from etlstage.protocol.replies import Exchange
>>> batch = Exchange(messages=0)
>>> ahead = WriteAhead(batch, batch_size=3, batch_bytes=100, replay_bytes=1000)
>>> ahead.room()
(3, 100)
>>> batch.messages = 2; ahead.add(40); ahead.room(), batch.closed
((1, 60), False)
>>> ahead.close(), batch.closed  # the engine closes it short: EOB after the second message
(True, True)
>>> full = Exchange(messages=3)
>>> ahead = WriteAhead(full, batch_size=3, batch_bytes=100, replay_bytes=1000)
>>> ahead.add(30); full.closed, ahead.room(), ahead.close()  # filled: no EOB
(True, (0, 0), False)
"""

from __future__ import annotations

from typing import Protocol


class Batch(Protocol):
    """What the rule reads and sets of the batch being written (the reply rules read the same)."""

    closed: bool

    @property
    def messages(self) -> int: ...


class WriteAhead:
    """One worker-driven batch as its messages are written.

    ``batch``'s ``messages`` counts the messages written (the caller adds them); ``unanswered``:
    bytes of input written to the worker beside this batch and not answered yet.
    """

    def __init__(
        self, batch: Batch, *, batch_size: int, batch_bytes: int, replay_bytes: int, unanswered: int = 0
    ) -> None:
        self.batch = batch
        self.batch_size = batch_size
        self.max_bytes = min(batch_bytes, replay_bytes - unanswered)
        self.size = 0  # bytes of the batch written

    def room(self) -> tuple[int, int]:
        """(messages, bytes) the batch may still take; no message: it is full (or closed)."""
        if self.batch.closed:
            return 0, 0
        return self.batch_size - self.batch.messages, max(0, self.max_bytes - self.size)

    def add(self, size: int) -> None:
        """Messages of ``size`` bytes in all are about to be written (``batch.messages`` counts
        them already): the one that fills the batch closes it.  Called before the write, so
        that an answer read while the write is under way finds the batch closed."""
        self.size += size
        self.batch.closed = self.batch.messages >= self.batch_size

    def close(self) -> bool:
        """The engine closes the batch: True when EOB must follow (a batch short of its
        size), False when the filling message closed it already."""
        if self.batch.closed:
            return False
        self.batch.closed = True
        return True


__all__ = ["Batch", "WriteAhead"]
