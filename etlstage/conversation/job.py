"""A job: what a stage writes to one worker in one go, on either engine.

One batch, or ``requests`` single-message requests, made of *parts*: blocks of complete
messages (each followed by EOM).  The supervisor's parts are its inbox's pieces, each of
one window (:class:`etlstage.runtime.flow.Piece`); a Spark task's are slices of its input
(:class:`Messages`).  The reply rules' fields are :class:`Exchange`'s; what a failure
does to a job (its tries, isolation, the wait for the worker to be in step) is
:mod:`etlstage.conversation.recovery`'s.

>>> job = Job(pieces=[Messages(b"a\\nb\\n", 2)], batch=True)
>>> job.messages, job.size, job.block
(2, 4, b'a\\nb\\n')
>>> job.add(Messages(b"c\\n", 1))
>>> job.messages, job.size, job.block
(3, 6, b'a\\nb\\nc\\n')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from etlstage.conversation.handed import Handed
from etlstage.protocol.replies import Exchange


class Part(Protocol):
    """Complete messages: the block (each message followed by EOM) and how many."""

    @property
    def block(self) -> bytes: ...

    @property
    def count(self) -> int: ...


@dataclass(slots=True)
class Messages:
    """A Spark task's part: ``count`` messages of its input; ``offset``: the task's
    messages before them (their place, for batch ids)."""

    block: bytes
    count: int
    offset: int = 0


P = TypeVar("P", bound=Part)


@dataclass(eq=False, kw_only=True)  # by name only: Exchange's fields come first
class Job(Exchange, Generic[P]):
    """Work written to one worker in one go: a batch, or ``requests`` single messages.

    ``messages`` and ``size`` count the parts (kept by :meth:`add`)."""

    pieces: list[P] = field(default_factory=list)
    batch: bool = False
    attempts: int = 0  # tries charged to it (recovery)
    messages: int = field(init=False, default=0)
    size: int = field(init=False, default=0)  # bytes of input (a worker-driven batch grows as it goes)
    alone: bool = False  # isolating a failure: nothing else in flight beside it, so blame is exact
    after_confirmation: bool = False  # sent again after a failure: only once what went before is in step
    resent: bool = False  # sent again after a failure (its answer does not prove the worker healthy)
    ident: str | None = None  # an L-stage with batch ids: its id, sent first, kept when it is sent again
    # the supervisor's: where its pieces sit in their windows (batch ids), the results it
    # handed on (a T-job sent again hands on only new ones), its input let go at its level
    places: list[tuple[str, int, int]] | None = None
    handed: Handed | None = None
    released: bool = False

    def __post_init__(self) -> None:
        self.messages = sum(p.count for p in self.pieces)
        self.size = sum(len(p.block) for p in self.pieces)

    def add(self, piece: P) -> None:
        """One more part (a worker-driven batch grows as its worker asks for more)."""
        self.pieces.append(piece)
        self.messages += piece.count
        self.size += len(piece.block)

    @property
    def block(self) -> bytes:
        if len(self.pieces) == 1:
            return self.pieces[0].block
        return b"".join(p.block for p in self.pieces)


__all__ = ["Job", "Messages", "Part"]
