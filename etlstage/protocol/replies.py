"""The reply rules: which reply answers which request.

A worker answers requests in the order they were written, without naming them, so a
reader must keep the requests it has outstanding and match every EOP, BNC and result
to the oldest one.  :class:`ReplyRules` does that and nothing else — no processes, no
event loop — for whatever drives a worker: the supervisor, the harness, a Spark task.

>>> from etlstage.protocol.framing import EOP
>>> rules = ReplyRules(results=True, worker_driven=False, batch_size=1)
>>> first, second = Exchange(requests=1), Exchange(requests=1)
>>> rules.sent(first); rules.sent(second)
>>> reading = rules.feed([b"r1\\n", b"r2\\n", EOP])
>>> reading.completed == [first], first.results
(True, [b'r1\\n', b'r2\\n'])
>>> rules.feed([EOP]).completed == [second], second.results
(True, [])
>>> rules.feed([EOP]).violation.problem
'the worker wrote bytes with no request outstanding'
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from etlstage.errors import ProtocolViolation, UnaskedReply
from etlstage.protocol.framing import EOP, Bncs, Token


class Outstanding(Protocol):
    """What the reply rules read and write of a request (or batch) written to a worker."""

    requests: int
    results: list[bytes]
    bounds: list[int]
    eops: int
    started: float
    closed: bool
    bncs: int

    @property
    def messages(self) -> int: ...


R = TypeVar("R", bound=Outstanding)


@dataclass(eq=False)
class Exchange:
    """A plain :class:`Outstanding`: one request (or one batch) written to a worker."""

    requests: int = 1  # EOPs that end it (a job of n single-message requests: n)
    messages: int = 1  # messages written so far (a worker-driven batch grows)
    results: list[bytes] = field(default_factory=list)
    bounds: list[int] = field(default_factory=list)  # len(results) at each EOP: per-request grouping
    eops: int = 0
    started: float = 0.0  # when it became the oldest outstanding (its time limit runs from here)
    closed: bool = False  # batch: EOB written, or filled (worker-driven)
    bncs: int = 0  # worker-driven: BNCs read for it so far

    def reset(self) -> None:
        """Forget a partial answer: the exchange is about to be written again."""
        self.results.clear()
        self.bounds.clear()
        self.eops = self.bncs = 0
        self.closed = False


def bncs_due(messages: int, batch_size: int) -> int:
    """BNCs a worker-driven batch of ``messages`` messages gets in all: one after each
    message that leaves it short of ``batch_size``, none after the one that fills it.
    Messages may be written ahead of the BNCs, so the worker's tokens are counted: an
    answer is due once the batch is closed and every BNC came.

    >>> bncs_due(2, 3), bncs_due(3, 3)
    (2, 2)
    """
    return min(messages, batch_size - 1)


@dataclass
class Reading(Generic[R]):
    """What one run of tokens meant: requests answered in full, and the violation that
    ended the run (tokens after it were not read)."""

    completed: list[R] = field(default_factory=list)
    violation: ProtocolViolation | None = None


class ReplyRules(Generic[R]):
    """Match a worker's tokens to the requests written to it, oldest first.

    ``results``: the worker may write results (a T-stage; an L-stage answers EOP only).
    ``worker_driven``: batches are closed by the worker's BNC/EOP dialogue.
    """

    def __init__(self, *, results: bool, worker_driven: bool, batch_size: int) -> None:
        self.results = results
        self.worker_driven = worker_driven
        self.batch_size = batch_size
        self.outstanding: collections.deque[R] = collections.deque()

    def sent(self, request: R) -> None:
        """A request was written; its time limit starts now if nothing is ahead of it."""
        if not self.outstanding:
            request.started = time.monotonic()
        self.outstanding.append(request)

    def feed(self, tokens: Iterable[Token]) -> Reading[R]:
        """Match ``tokens`` (in order) to the outstanding requests.  One loop with local
        names: it runs for every token the supervisor reads."""
        reading: Reading[R] = Reading()
        outstanding = self.outstanding
        completed = reading.completed
        head = outstanding[0] if outstanding else None
        try:
            for tok in tokens:
                if head is None:
                    raise UnaskedReply(
                        "the worker wrote bytes with no request outstanding", tok if isinstance(tok, bytes) else b""
                    )
                if tok is EOP:
                    head.eops += 1
                    head.bounds.append(len(head.results))
                    if self.worker_driven and (not head.closed or head.bncs < bncs_due(head.messages, self.batch_size)):
                        raise ProtocolViolation(
                            f"EOP after {min(head.bncs + 1, head.messages)} message(s) of a batch of "
                            f"{self.batch_size} that the supervisor had not closed (expected BNC)"
                        )
                    if head.eops == head.requests:
                        outstanding.popleft()
                        completed.append(head)
                        head = outstanding[0] if outstanding else None
                        if head is not None:
                            head.started = time.monotonic()
                elif isinstance(tok, Bncs):
                    self._bncs(head, tok.count)
                elif self.results:
                    head.results.append(tok)  # type: ignore[arg-type]
                else:
                    raise ProtocolViolation(
                        "an L-stage worker wrote a result; L-workers answer with EOP only",
                        tok,  # type: ignore[arg-type]
                    )
        except ProtocolViolation as exc:
            reading.violation = exc
        return reading

    def _bncs(self, head: R, count: int) -> None:
        """``count`` BNCs in a row: each for the next message written that leaves the batch
        short; one more than the messages written so far allow is a violation."""
        due = bncs_due(head.messages, self.batch_size)
        if head.bncs + count > due:
            filled = head.messages >= self.batch_size
            raise ProtocolViolation(
                f"BNC after message {due + 1 if filled else head.messages} of a batch of {self.batch_size}"
                + (
                    " — that message filled the batch, so the worker must process it and write EOP"
                    if filled
                    else " — no BNC was due"
                )
            )
        head.bncs += count


def unasked_before_request(tokens: Sequence[Token], answered: bool = True) -> UnaskedReply | None:
    """What a worker wrote since its last answer (``answered``; else since it started: a
    banner), read just before its next request is written: anything at all is a violation,
    or a stray EOP would answer that request (an E-stage's cycle would come back empty, and
    its window commit with nothing).

    >>> unasked_before_request([]) is None, unasked_before_request([b"x\\n", EOP]).snippet
    (True, b'x\\nEOP')
    """
    if not tokens:
        return None
    snippet = b"".join(t if isinstance(t, bytes) else repr(t).encode() for t in tokens)
    if not answered:
        return UnaskedReply("the worker wrote bytes with no request outstanding (before its first request)", snippet)
    return UnaskedReply("the worker wrote after its last EOP, before the next request", snippet)


__all__ = ["Exchange", "Outstanding", "Reading", "ReplyRules", "bncs_due", "unasked_before_request"]
