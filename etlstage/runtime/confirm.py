"""Answers held until the worker's replies are known to line up with its requests.

A worker answers without naming the request, so one stray or repeated EOP shifts every
later answer onto the wrong request, and the shift shows only when an answer arrives
with nothing outstanding — possibly after the windows of the shifted jobs were done.
So a T- or L-stage holds each answered job (its input, and a hold on its windows: they cannot
commit) until the worker is known to be in step: it went quiet with nothing outstanding
for a settle time (twice the slowest recent answer), or it closed its stdout cleanly.
If anything goes wrong before that, the held jobs are sent again with the unanswered
ones: at-least-once, never a lost answer.

Held input is bounded (``replay_bytes``): beyond it the oldest jobs let their input go
and keep only the hold on their windows.  A shift shows in the newest answers, which
are kept; but if the worker then proves out of step (an answer with nothing
outstanding, a protocol violation) while input was let go, the stage must stop: its
held windows do not commit and the next run extracts them again.
"""

from __future__ import annotations

import asyncio
import collections

from etlstage.conversation.policy import settle_time
from etlstage.runtime.flow import Job, Window


class Unconfirmed:
    """The jobs one worker process answered since it was last known to be in step."""

    def __init__(self, level: int, limit_bytes: int) -> None:
        self.level = level
        self.limit_bytes = limit_bytes  # held input beyond this: the oldest let it go
        self.jobs: list[Job] = []  # held with their input, oldest first
        self.let_go: collections.Counter[Window] = collections.Counter()  # holds of jobs whose input went
        self.bytes = 0
        self.windows: collections.Counter[Window] = collections.Counter()
        self.service: collections.deque[float] = collections.deque(maxlen=16)
        self.empty = asyncio.Event()
        self.empty.set()

    def __bool__(self) -> bool:
        return bool(self.jobs or self.let_go)

    def add(self, job: Job, service_time: float) -> None:
        """``job`` was answered (its results are on their way): hold it until confirmed."""
        self.jobs.append(job)
        self.bytes += sum(len(p.block) for p in job.pieces)
        self.service.append(service_time)
        for p in job.pieces:
            self.windows[p.window] += 1
            p.window.hold()
        self.empty.clear()
        while self.bytes > self.limit_bytes and len(self.jobs) > 1:
            old = self.jobs.pop(0)  # its windows stay held; its input cannot be sent again
            for p in old.pieces:
                self.bytes -= len(p.block)
                self.let_go[p.window] += 1

    def settle(self) -> float:
        """How long a worker with nothing outstanding must stay quiet to be in step."""
        return settle_time(self.service)

    def due(self) -> bool:
        """Confirm before more is sent: a held window has passed this stage entirely (only
        the confirmation keeps it from committing)."""
        return any(w.closed and not any(w.live[1 : self.level + 1]) for w in self.windows)

    def confirm(self) -> int:
        """The worker is in step: release the held windows.  Returns the jobs confirmed."""
        n = len(self.jobs) + len(self.let_go)
        self._release_let_go()
        jobs, self.jobs = self.jobs, []
        self.bytes = 0
        self.windows.clear()
        for job in jobs:
            for p in job.pieces:
                p.window.unhold()
        self.empty.set()
        return n

    def _release_let_go(self) -> None:
        let_go, self.let_go = self.let_go, collections.Counter()
        for w, n in let_go.items():
            w.unhold(n)

    def take_back(self) -> list[Job]:
        """The worker failed before it was confirmed: its answered jobs that still have
        their input go out again (the others are released as answered)."""
        self._release_let_go()
        jobs, self.jobs = self.jobs, []
        self.bytes = 0
        self.windows.clear()
        for job in jobs:
            job.reset()
            for p in job.pieces:
                p.window.add(self.level, p.count)
                p.window.unhold()
        self.empty.set()
        return jobs


__all__ = ["Unconfirmed"]
