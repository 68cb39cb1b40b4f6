"""Answers held until the worker's replies are known to line up with its requests: pure, both engines.

A worker answers without naming the request, so one stray or repeated EOP shifts every
later answer onto the wrong request, and the shift shows only when an answer arrives
with nothing outstanding — possibly after the windows of the shifted jobs were done.
So a T- or L-stage holds each answered job (its input, and a hold on its windows: they cannot
commit) until the worker is known to be in step: it went quiet with nothing outstanding
for a settle time (twice the slowest recent answer), or it closed its stdout cleanly.
If anything goes wrong before that, the held jobs are sent again with the unanswered
ones: never a lost answer (and a T-stage's re-answer that repeats what its job handed on
is not handed on again: :mod:`etlstage.conversation.handed`).

Quiet is not proof: a worker that wrote a stray EOP and then answers late (after the
settle time) passes one quiet check, and the shift shows only later. So quiet counts
only where it must — when a held window has passed this stage and waits on nothing but
the confirmation (:meth:`Unconfirmed.due`) — and, once an answer gave cause for doubt
(it came right behind the previous EOP, in a fraction of the worker's usual time, or
unseen while the reader was busy: :class:`~etlstage.conversation.policy.Pace`), an
answered job holds its windows until the worker has passed **two** such checks after it
(the first makes it *suspect*, the second releases it), or until the worker ended
cleanly on end of input (it wrote nothing more before its end of file). Answers that
gave no cause are released by one short check: a stray EOP they could hide would have
made one of them doubtful. At the end of input the driver waits for that end rather than
for quiet: the last windows of a run are confirmed by positive evidence. A late answer
that shows within that time sends every held and suspect job again. One that shows
later, once the windows of the last release have committed, stops the stage naming them:
answers may be on the wrong requests there and cannot be sent again.

Held input is bounded (``replay_bytes``): beyond it the oldest jobs let their input go
and keep only the hold on their windows.  A shift shows in the newest answers, which
are kept; but if the worker then proves out of step (an answer with nothing
outstanding, a protocol violation) while input was let go, the stage must stop: its
held windows do not commit and the next run extracts them again.

A Spark task holds a job's results themselves until then (they go on to Spark only once
confirmed) and has no windows: its jobs never let their input go, and it stops writing
to confirm once it holds ``replay_bytes`` of answered input.  The supervisor hands the
results on at once and holds the windows (:mod:`etlstage.runtime.confirm` adds what its
event loop waits on).  No I/O, no clock: the engines wait out the quiet and say when
it passed (:meth:`Confirmation.confirm`).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from typing import Any, Generic, Protocol, TypeVar

from etlstage.conversation.policy import Pace


class Hold(Protocol):
    """What holding a job's answer does to the window its messages belong to (the
    supervisor's :class:`~etlstage.runtime.flow.Window`; a Spark task has none)."""

    source: str
    seq: int
    closed: bool
    live: list[int]

    @property
    def done(self) -> bool: ...

    def hold(self) -> None: ...

    def unhold(self, n: int = 1) -> None: ...

    def add(self, level: int, n: int) -> None: ...


class Held(Protocol):
    """What the confirmation reads of a job (:class:`~etlstage.conversation.job.Job` has it)."""

    size: int
    released: bool

    def reset(self) -> None: ...


J = TypeVar("J", bound=Held)
HoldsFn = Callable[[Any], Iterable[tuple[Hold, int]]]  # a job's (window, messages) per part


def no_holds(job: object) -> Iterable[tuple[Hold, int]]:
    """A job whose parts hold no window (a Spark task's)."""
    return ()


class Confirmation(Generic[J]):
    """The jobs one worker process answered since it was last known to be in step."""

    def __init__(self, level: int, limit_bytes: int, pace: Pace | None = None, holds: HoldsFn = no_holds) -> None:
        """``level``: the stage's in the pipeline (its windows count messages per level);
        ``limit_bytes``: held input beyond it lets the oldest jobs' input go (only jobs
        whose results went on); ``pace``: the worker process's answers (its
        :class:`~etlstage.conversation.machine.Conversation` records them, the confirmation
        reads them); ``holds(job)``: the window of each of its parts, with its messages."""
        self.level = level
        self.limit_bytes = limit_bytes  # held input beyond this: the oldest let it go
        self.holds = holds
        self.jobs: list[J] = []  # held with their input, oldest first
        self.suspects = 0  # the first this many jobs passed one quiet check already
        self.let_go: collections.Counter[Hold] = collections.Counter()  # holds of jobs whose input went
        self.suspect_let_go: collections.Counter[Hold] = collections.Counter()  # the same, suspect
        self.bytes = 0
        self.windows: collections.Counter[Hold] = collections.Counter()  # holds taken, by window
        self.released: set[Hold] = set()  # the windows the last release on quiet alone let go
        self.pace = pace or Pace()  # the worker's answers: how long they take, and any cause for doubt

    def __bool__(self) -> bool:
        return bool(self.jobs or self.let_go or self.suspect_let_go)

    def input_let_go(self) -> bool:
        """Some held job let its input go: it cannot be sent again."""
        return bool(self.let_go or self.suspect_let_go)

    def add(self, job: J) -> None:
        """``job`` was answered (its time is in :attr:`pace`): hold it until confirmed."""
        self.jobs.append(job)
        self.bytes += job.size
        for window, _ in self.holds(job):
            self.windows[window] += 1
            window.hold()
        # (never one whose results are still going on: a failure must find it to send it again)
        while self.bytes > self.limit_bytes and len(self.jobs) > 1 and self.jobs[0].released:
            old = self.jobs.pop(0)  # its windows stay held; its input cannot be sent again
            into = self.let_go
            if self.suspects:
                self.suspects -= 1
                into = self.suspect_let_go
            self.bytes -= old.size
            for window, _ in self.holds(old):
                into[window] += 1

    def settle(self) -> float:
        """How long a worker with nothing outstanding must stay quiet for one check."""
        return self.pace.settle()

    def due(self) -> bool:
        """Confirm before more is sent: a held window has passed this stage entirely (only
        the confirmation keeps it from committing).  A quiet check counts only then, or
        when the driver waits for one (``wanted``)."""
        return any(w.closed and not any(w.live[1 : self.level + 1]) for w in self.windows)

    def confirm(self, proven: bool = False) -> int:
        """The worker passed a quiet check (``proven``: it ended cleanly on end of input).
        The suspect jobs are released, and the others become suspect (all are released
        when ``proven``, or when no answer gave cause for doubt).  Returns the jobs that
        passed the check."""
        n = len(self.jobs) - self.suspects + sum(self.let_go.values())
        at_once = proven or self.pace.checks() == 1
        cut = len(self.jobs) if at_once else self.suspects
        released, self.jobs = self.jobs[:cut], self.jobs[cut:]
        if proven:
            self.released = set()
        elif released or self.suspect_let_go or (at_once and self.let_go):
            self.released = {w for job in released for w, _ in self.holds(job)} | set(self.suspect_let_go)
            if at_once:
                self.released |= set(self.let_go)
        self._unhold(self.suspect_let_go)
        self.suspect_let_go, self.let_go = self.let_go, collections.Counter()
        if at_once:
            self._unhold(self.suspect_let_go)
            self.suspect_let_go = collections.Counter()
        self.suspects = len(self.jobs)
        for job in released:
            self.bytes -= job.size
            for window, _ in self.holds(job):
                self._unhold({window: 1})
        if not self:
            self.pace.doubt = False  # every answer in doubt passed its checks
        return n

    def committed_on_quiet(self) -> list[Hold]:
        """The windows of the last release on quiet alone that are done (committed, or about
        to be): answers shifted by a stray EOP may have reached them unseen."""
        return sorted((w for w in self.released if w.done), key=lambda w: (w.source, w.seq))

    def _unhold(self, holds: collections.Counter[Hold] | dict[Hold, int]) -> None:
        for w, n in holds.items():
            self.windows[w] -= n
            if self.windows[w] <= 0:
                del self.windows[w]
            w.unhold(n)

    def take_back(self) -> list[J]:
        """The worker failed before it was confirmed: its answered jobs (suspect or not)
        that still have their input go out again (the others are released as answered)."""
        self._unhold(self.let_go + self.suspect_let_go)
        self.let_go, self.suspect_let_go = collections.Counter(), collections.Counter()
        jobs, self.jobs = self.jobs, []
        self.suspects = 0
        self.bytes = 0
        self.windows.clear()
        for job in jobs:
            job.reset()
            for window, count in self.holds(job):
                if job.released:  # in flight again (one cut short while handing on never let go)
                    window.add(self.level, count)
                window.unhold()
            job.released = False
        return jobs


__all__ = ["Confirmation", "Held", "Hold", "no_holds"]
