"""What a T-stage already handed on, so that a job sent again after a failure hands on
only what it had not (docs/protocol.md: answers in step).

A T-worker's answers are handed on as they arrive, before the worker is known to be in
step; if it then fails, its answered jobs since it was last in step are sent again. The
results of a deterministic worker are then the same bytes as before: handing them on
again would duplicate them downstream. So each answered job remembers what it handed on
(the result block while the job is held, a fingerprint of it once the job is sent
again), and a re-answer is handed on only when its results differ from every answer of
the same job handed on before.

The rule on a mismatch (the worker is not deterministic, or its earlier answer was
shifted onto this job by a stray EOP): the new answer is handed on whole. What went on
earlier cannot be taken back, so downstream may see both (at-least-once for that job);
dropping the new one could lose results nobody has. A stage declared ``deterministic:
false`` skips the comparison: every re-answer is handed on (at-least-once).

Pure: no I/O, no clocks; the supervisor's T driver calls it. The Spark engine hands a
task's results on only once they are confirmed (a failure sends again what nobody has
seen yet), so it has nothing to compare.

>>> h = Handed()
>>> h.handing(b"r1\\nr2\\n"); h.sent_again()
>>> h.hand_on(b"r1\\nr2\\n", deterministic=True), h.hand_on(b"r1\\nX\\n", deterministic=True)
(False, True)
>>> h.hand_on(b"r1\\nr2\\n", deterministic=False)
True
"""

from __future__ import annotations

import hashlib

# a log format: stage, messages
MISMATCH = (
    "stage %r: a job sent again after a failure answered %d result(s) unlike its earlier answer; "
    "handed on whole (the next stage may see both; is the worker deterministic?)"
)


def fingerprint(block: bytes) -> bytes:
    """A collision-resistant digest of a result block: equal only for equal bytes (a false
    match would drop results, so no short checksum)."""
    return hashlib.sha256(block).digest()


class Handed:
    """The answers one job handed on: the latest block while the job is held (kept as is:
    nothing is hashed unless the job is sent again), fingerprints once it is."""

    __slots__ = ("block", "prints")

    def __init__(self) -> None:
        self.block: bytes | None = None  # handed on, not yet fingerprinted
        self.prints: set[bytes] = set()

    @property
    def went_on(self) -> bool:
        """Whether any answer of the job went on whole (one cut short by a failure did not)."""
        return self.block is not None or bool(self.prints)

    def handing(self, block: bytes) -> None:
        """``block`` goes on to the next stage now."""
        if self.block is not None:
            self.prints.add(fingerprint(self.block))
        self.block = block

    def sent_again(self) -> None:
        """The job is about to be sent again: keep a fingerprint, let the bytes go."""
        if self.block is not None:
            self.prints.add(fingerprint(self.block))
            self.block = None

    def hand_on(self, block: bytes, *, deterministic: bool) -> bool:
        """Whether a re-answer's results go on: not when the same bytes already did (a
        deterministic stage); always on a mismatch, or for a stage that is not."""
        if not deterministic:
            return True
        if not self.prints and self.block is None:
            return True
        if self.block is not None and self.block == block:
            return False
        return fingerprint(block) not in self.prints


__all__ = ["MISMATCH", "Handed", "fingerprint"]
