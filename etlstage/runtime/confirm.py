"""The supervisor's confirmation: :class:`~etlstage.conversation.confirmation.Confirmation`
(the rules, both engines) over the windows of its jobs' pieces, and what its event loop
waits on: every held job confirmed (``empty``), and whether the feed waits for that
(``wanted``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from etlstage.conversation.confirmation import Confirmation, Hold
from etlstage.conversation.policy import Pace
from etlstage.runtime.flow import Job

RECHECK = 0.02  # a quiet worker with held jobs is checked again this often


def window_holds(job: Job) -> Iterable[tuple[Hold, int]]:
    """Each of ``job``'s pieces: its window, with its messages."""
    return [(p.window, p.count) for p in job.pieces]


class Unconfirmed(Confirmation[Job]):
    """The jobs one worker process answered since it was last known to be in step."""

    def __init__(self, level: int, limit_bytes: int, pace: Pace | None = None) -> None:
        super().__init__(level, limit_bytes, pace, window_holds)
        self.empty = asyncio.Event()  # set while nothing is held
        self.empty.set()
        self.wanted = False  # the driver waits for a confirmation before it sends more

    def add(self, job: Job) -> None:
        super().add(job)
        self.empty.clear()

    def confirm(self, proven: bool = False) -> int:
        passed = super().confirm(proven)
        if not self:
            self.empty.set()
        return passed

    def take_back(self) -> list[Job]:
        jobs = super().take_back()
        self.empty.set()
        return jobs


__all__ = ["RECHECK", "Unconfirmed"]
