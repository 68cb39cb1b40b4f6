"""Where each L batch sits in its windows' streams, for its id (:mod:`etlstage.conversation.batchid`).

One :class:`Places` per stage instance counts, per window, the messages that instance
took so far: a batch's place is, for each of its pieces, the window's source and number
and that count before the piece. Window numbers are counted across runs, so a window
extracted again after the supervisor died has the number it had.
"""

from __future__ import annotations

from etlstage.conversation.batchid import Place
from etlstage.runtime.flow import Piece, Window

PRUNE_AT = 64  # windows counted before the done ones are forgotten


class Places:
    """Messages of each window one stage instance has taken."""

    def __init__(self) -> None:
        self.taken: dict[Window, int] = {}

    def take(self, pieces: list[Piece]) -> list[Place]:
        """The places of ``pieces``, which this instance takes now, in order."""
        out: list[Place] = []
        for p in pieces:
            before = self.taken.get(p.window, 0)
            out.append((p.window.source, p.window.seq, before))
            self.taken[p.window] = before + p.count
        if len(self.taken) > PRUNE_AT:
            self.taken = {w: n for w, n in self.taken.items() if not w.done}
        return out


def singles(places: list[Place], counts: list[int]) -> list[Place]:
    """The place of each message of a batch whose pieces sit at ``places`` and hold
    ``counts`` messages: its messages one by one (isolating a failure)."""
    return [(s, n, k + j) for (s, n, k), c in zip(places, counts, strict=True) for j in range(c)]


__all__ = ["Places", "singles"]
