"""The conversation rules, written once for every engine: pure, no I/O, no clocks.

The supervisor's stage drivers (:mod:`etlstage.runtime.driver`, ``session``) and the
Spark engine's task conversation (:mod:`etlstage.spark.tasks.conversation`, ``extract``) ask
this module, and only this module:

- how long to wait before restarting a failed worker, and when failures in a row stop
  the run (:class:`Restarts`, :func:`next_delay`);
- what a job that failed once more does under ``on_failure`` (:func:`after_failure`);
- by when the worker must answer next, and which limit that is (:func:`answer_deadline`);
- when a batch is full (:func:`batch_full`, :func:`batch_cut`; a
  worker-driven batch is written ahead of its BNCs by :mod:`etlstage.conversation.writeahead`);
- whether more input may be written beside what is unanswered (:func:`may_write`), and
  which jobs wait until the worker is in step with everything before them (:func:`in_step_first`);
- how long a worker with nothing outstanding stays quiet to be in step (:func:`settle_time`),
  whether its answers give cause to doubt that they line up, and how many quiet checks
  then confirm them (:class:`Pace`);
- how long a fresh worker is watched before its first request (:data:`STARTUP_QUIET`), and
  when its early exit is a broken command that stops the stage (:func:`broken_command`).

Callers pass times and counts in; nothing here sleeps, logs or reads a clock.

>>> from etlstage.config.model import RestartPolicy
>>> [next_delay(RestartPolicy(backoff=0.5, backoff_max=3), n) for n in (1, 2, 3, 4, 5)]
[0.5, 1.0, 2.0, 3, 3]
>>> batch_full(2, 10, want=3, max_bytes=100), batch_full(3, 10, want=3, max_bytes=100)
(False, True)
"""

from __future__ import annotations

import bisect
import collections
import math
import statistics
from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Protocol

from etlstage.config.model import RestartPolicy, StageConfig, Timeouts
from etlstage.errors import PipelineError, WorkerError, WorkerGone
from etlstage.protocol.vocabulary import OnFailure

MIN_SETTLE = 0.005  # a stray EOP written with its reply arrives within this, even under load
MAX_SETTLE = 2.0
# An EOP this soon after the worker's previous one may be a stray written with that answer.
# Times are taken as the event loop sees the bytes: the margin covers its latency under load.
RAPID = 0.25

# A fresh worker's output is looked for this long before its first request (less when it is
# seen waiting for that request with nothing written): a banner or log line written at
# start-up is then bytes with no request outstanding, a violation, rather than the start
# of its first answer.  Both engines and `check-worker` wait the same.
STARTUP_QUIET = 0.3
STARTUP_POLL = 0.003  # meanwhile, how often the worker is looked at: waiting for its first request yet?

ISOLATING = "%s: a batch of %d failed %d times; trying its messages one by one"  # a log format: label, n, tries


# --- restarts --------------------------------------------------------------------------------


def next_delay(restart: RestartPolicy, failures: int) -> float:
    """Seconds before the restart that follows ``failures`` failures in a row (1: the
    first): ``backoff``, doubling each time, at most ``backoff_max``."""
    return min(restart.backoff * 2 ** max(0, failures - 1), restart.backoff_max)


class Restarts:
    """Failures of one worker instance in a row: the wait before each restart, and the
    error once there were too many with no job to blame.

    >>> from etlstage.errors import WorkerGone
    >>> r = Restarts(RestartPolicy(max_restarts=1, backoff=1), "t")
    >>> r.failed(WorkerGone("exited"))
    (1, 't failed (exited); restart 1 of at most 1 in a row in 1.0s')
    >>> r.failed(WorkerGone("exited"), charged=2)[0]  # a job takes the blame: its tries decide
    2
    >>> r.failed(WorkerGone("exited"))
    Traceback (most recent call last):
    ...
    etlstage.errors.PipelineError: t failed 3 times in a row (max_restarts=1); last error: exited
    """

    def __init__(self, restart: RestartPolicy, label: str) -> None:
        self.policy = restart
        self.label = label
        self.in_a_row = 0

    def succeeded(self) -> None:
        """New work went through: earlier failures are no longer "in a row"."""
        self.in_a_row = 0

    def failed(self, error: WorkerError, charged: int | None = None) -> tuple[float, str]:
        """One more failure: (seconds to wait before the restart, the line to log).

        ``charged``: the tries of the job that took the blame (its own count decides what
        happens, :func:`after_failure`); without one, more than ``max_restarts`` failures
        in a row stop the run (:class:`PipelineError`).
        """
        self.in_a_row += 1
        if charged is None and self.in_a_row > self.policy.max_restarts:
            raise PipelineError(
                f"{self.label} failed {self.in_a_row} times in a row (max_restarts={self.policy.max_restarts}); "
                f"last error: {error}"
            ) from error
        delay = next_delay(self.policy, self.in_a_row)
        if charged is None:
            attempt = f"restart {self.in_a_row} of at most {self.policy.max_restarts} in a row"
        else:
            attempt = f"restart; {charged_text(charged, self.policy.max_restarts)}"
        return delay, f"{self.label} failed ({error.detail}); {attempt} in {delay:.1f}s"


def charged_text(attempts: int, max_restarts: int) -> str:
    """What becomes of the job that took the blame, after its ``attempts``-th failure.

    >>> charged_text(1, 2), charged_text(3, 2)
    ('its job is sent again (try 2 of 3)', 'its job failed its last try: on_failure applies')
    """
    tries = max_restarts + 1
    if attempts < tries:
        return f"its job is sent again (try {attempts + 1} of {tries})"
    return "its job failed its last try: on_failure applies"


# --- on_failure ------------------------------------------------------------------------------


class Verdict(StrEnum):
    """What becomes of a job whose worker failed while it was the one being answered."""

    RESEND = "resend"  # tries left: send it again as it was
    ISOLATE = "isolate"  # out of tries, several messages: each once more, alone
    DEADLETTER = "deadletter"  # out of tries, one message: set aside, the rest goes on


def after_failure(stage: StageConfig, attempts: int, messages: int, batch: bool, error: WorkerError) -> Verdict:
    """The verdict on a job that has now failed ``attempts`` times; under ``on_failure:
    fail`` a job out of tries stops the run (:class:`PipelineError`, one text for both engines).

    >>> from etlstage.config.model import StageConfig
    >>> from etlstage.errors import WorkerGone
    >>> from etlstage.protocol.markers import Markers
    >>> from etlstage.protocol.vocabulary import Mode, StageType
    >>> st = StageConfig("t", StageType.T, ["w"], Mode.BATCH, Markers(), on_failure=OnFailure.DEADLETTER)
    >>> [after_failure(st, n, m, True, WorkerGone("x")).value for n, m in ((5, 9), (6, 9), (6, 1))]
    ['resend', 'isolate', 'deadletter']
    """
    if attempts <= stage.restart.max_restarts:
        return Verdict.RESEND
    if stage.on_failure == OnFailure.FAIL:
        raise PipelineError(
            f"stage {stage.name!r}: a {'batch' if batch else 'request'} of {messages} message(s) "
            f"failed {attempts} times; on_failure=fail stops the pipeline (nothing committed past it)."
            + (f" Its worker said: {error.cause}" if error.cause else "")
            + "\n"
            f"Last error: {error}"
        ) from error
    return Verdict.ISOLATE if messages > 1 else Verdict.DEADLETTER


def broken_command(error: WorkerError, *, asked: bool, worked: bool, returncode: int | None) -> bool:
    """Whether a worker's failure is a broken command (a missing script, a bad option)
    rather than a bad message: it exited on its own (an exit status, not a signal) before
    its first request was written, and no process of its instance ever answered one.  The
    stage then stops at once on both engines: a restart would fail the same way, and no
    message is to blame (no try charged, nothing dead-lettered).

    >>> from etlstage.errors import WorkerGone, WorkerTimeout
    >>> broken_command(WorkerGone("exited"), asked=False, worked=False, returncode=2)
    True
    >>> broken_command(WorkerGone("exited"), asked=True, worked=False, returncode=2)  # a message may be to blame
    False
    >>> broken_command(WorkerGone("killed"), asked=False, worked=False, returncode=-9)  # the OOM killer, an operator
    False
    >>> broken_command(WorkerTimeout("silent"), asked=False, worked=False, returncode=None)
    False
    """
    return isinstance(error, WorkerGone) and not asked and not worked and returncode is not None and returncode >= 0


# --- time limits -----------------------------------------------------------------------------


def answer_deadline(
    timeouts: Timeouts,
    *,
    has_requests: bool,
    head_started: float | None,
    answered: bool,
    started: float,
    last_output: float,
) -> tuple[float | None, str]:
    """The earliest time limit now running and its name; ``(None, "")`` for none.

    ``head_started``: when the oldest unanswered request became the oldest (None: nothing
    outstanding); ``answered``: this process answered before (else ``startup`` applies,
    not ``request``); ``started``: when the process started; ``last_output``: when it
    last wrote anything.  A plain E-stage has no requests: its start-up limit runs from
    its start until its first output, its idle limit all along.

    >>> t = Timeouts(startup=10, request=5, idle=3)
    >>> answer_deadline(t, has_requests=True, head_started=100, answered=True, started=0, last_output=99)
    (102, 'idle timeout of 3s (no output)')
    >>> answer_deadline(t, has_requests=True, head_started=None, answered=True, started=0, last_output=99)
    (None, '')
    >>> answer_deadline(Timeouts(), has_requests=False, head_started=None, answered=False, started=0, last_output=0)
    (120.0, 'start-up timeout of 120s (no output yet)')
    """
    best: tuple[float | None, str] = (None, "")
    if head_started is not None:
        limit = timeouts.request if answered else timeouts.startup
        if limit is not None:
            best = (head_started + limit, f"{'request' if answered else 'start-up'} timeout of {limit:g}s")
    elif not has_requests and timeouts.startup is not None and not answered:
        best = (started + timeouts.startup, f"start-up timeout of {timeouts.startup:g}s (no output yet)")
    if timeouts.idle is not None and (head_started is not None or not has_requests):
        idle_at = last_output + timeouts.idle
        if best[0] is None or idle_at < best[0]:
            best = (idle_at, f"idle timeout of {timeouts.idle:g}s (no output)")
    return best


# --- batches and the replay budget -----------------------------------------------------------


def batch_full(messages: int, size: int, *, want: int, max_bytes: int) -> bool:
    """A job of ``messages`` messages and ``size`` bytes is closed: it has the ``want``
    messages it may hold (``batch_size``; single requests: ``single_job_size``), or
    ``max_bytes`` (``batch_bytes``).

    >>> batch_full(1, 100, want=3, max_bytes=100), batch_full(1, 99, want=3, max_bytes=100)  # bytes: at the bound
    (True, False)
    """
    return messages >= want or size >= max_bytes


class Ends(Protocol):
    """End offsets of a block's messages, ascending: a list, or a numpy array (no copy)."""

    def __len__(self) -> int: ...
    def __getitem__(self, index: int) -> int: ...


def batch_cut(ends: Ends, first: int, held: int, held_bytes: int, *, want: int, max_bytes: int) -> int | None:
    """Where the job being filled closes in a block of messages, or None if all of them fit.

    ``ends``: the end offset (exclusive) of each message of the block, ascending; the job
    takes the block's messages from index ``first`` on, after ``held`` messages of
    ``held_bytes`` bytes it already has from earlier blocks.  Returns the index (exclusive)
    of its last message in the block: it closes at ``want`` messages, or once it holds
    ``max_bytes``; a message that would take it over ``max_bytes`` starts the next job,
    unless it is the job's first (then it goes alone).

    >>> ends = [3, 6, 9, 30, 33]  # messages of 3, 3, 3, 21 and 3 bytes
    >>> batch_cut(ends, 0, 0, 0, want=2, max_bytes=100), batch_cut(ends, 2, 0, 0, want=5, max_bytes=10)
    (2, 3)
    >>> batch_cut(ends, 3, 0, 0, want=5, max_bytes=10), batch_cut(ends, 4, 0, 0, want=5, max_bytes=10)
    (4, None)
    >>> batch_cut(ends, 0, 1, 9, want=5, max_bytes=10)  # 9 bytes held: the next message starts a new job
    0
    """
    start = ends[first - 1] if first else 0
    by_count = first + want - held
    limit = start + max_bytes - held_bytes  # the job is full once a message ends here or later
    i = bisect.bisect_left(ends, limit, first)
    by_bytes = len(ends) + 1
    if i < len(ends):
        by_bytes = i + 1 if ends[i] == limit or (i == first and not held) else i
    cut = min(by_count, by_bytes)
    return cut if cut <= len(ends) else None


def may_write(unanswered_bytes: int, next_bytes: int, replay_bytes: int) -> bool:
    """Whether a job of ``next_bytes`` may be written beside ``unanswered_bytes`` of input
    written and not answered yet: within ``replay_bytes``, or nothing is outstanding."""
    return not unanswered_bytes or unanswered_bytes + next_bytes <= replay_bytes


class Placed(Protocol):
    """What :func:`in_step_first` reads of a job (both engines' jobs have it)."""

    alone: bool
    after_confirmation: bool


def in_step_first(job: Placed) -> bool:
    """Whether ``job`` is written only once nothing is outstanding and every earlier answer
    is confirmed (the worker quiet, in step): an isolated message, and a job sent again
    behind jobs answered before a failure (:func:`etlstage.conversation.recovery.recover`).
    A failure while it is in flight is then its own, and it alone is charged the try.

    >>> from types import SimpleNamespace as Job
    >>> behind_answered, fresh = Job(alone=False, after_confirmation=True), Job(alone=False, after_confirmation=False)
    >>> in_step_first(behind_answered), in_step_first(fresh)
    (True, False)
    """
    return job.alone or job.after_confirmation


def settle_time(service_times: Iterable[float]) -> float:
    """How long a worker with nothing outstanding must stay quiet to be known in step:
    twice its slowest recent answer, within [``MIN_SETTLE``, ``MAX_SETTLE``]."""
    return min(max(MIN_SETTLE, 2 * max(service_times, default=0.0)), MAX_SETTLE)


def doubtful_answer(service: float, since_previous_eop: float, recent: Sequence[float]) -> bool:
    """Whether an answer may not be the worker's answer to its request, but a stray EOP
    taken for it: it came within ``RAPID`` of the worker's previous EOP (a stray written
    with that answer), or in under a quarter of the worker's typical time (``recent``: its
    last answers' times, five at least; a stray written on its own, while it worked).
    A quarter, not a half: a worker's first answers are slow (a JVM warming up), and its
    next ones are not strays for being faster.

    >>> typical = [1.4, 1.6, 1.5, 1.5, 1.5]
    >>> doubtful_answer(1.5, 1.5, typical), doubtful_answer(1.5, 0.0, typical)
    (False, True)
    >>> doubtful_answer(0.3, 0.3, typical), doubtful_answer(0.3, 0.3, [1.5]), doubtful_answer(0.7, 0.7, typical)
    (True, False, False)
    """
    if since_previous_eop < RAPID:
        return True
    return len(recent) >= 5 and service < statistics.median(recent) / 4


class Pace:
    """One worker process's answers as the rules on confirmation need them: how long they
    took, and whether one of them gave cause for doubt since it was last confirmed.

    A stray EOP shows as an answer that came too soon (:func:`doubtful_answer`); the late
    real answer it leaves behind then arrives with nothing outstanding, which the quiet
    checks wait for (:func:`settle_time`). Answers that give no such cause — none came
    right behind another, none in a fraction of the worker's usual time, each seen
    arriving — are confirmed by one check of ``RAPID``: a stray written with an answer
    arrives within it (a fast worker's own settle time when that is shorter). So a slow
    worker in step (a loader taking seconds a batch) no longer waits out two settle times
    at every window's end; a doubtful one still does.

    >>> pace = Pace()
    >>> for t in (10.0, 11.5, 13.0):
    ...     pace.answered(1.5, t, t)
    >>> pace.doubt, pace.settle()
    (False, 0.25)
    >>> pace.answered(1.5, 13.1, 13.1)  # a second EOP right behind the last
    >>> pace.doubt, pace.settle()
    (True, 2.0)
    """

    def __init__(self) -> None:
        self.service: collections.deque[float] = collections.deque(maxlen=16)
        self.previous_eop = -math.inf
        self.doubt = False

    def answered(self, service: float, arrived: float | None, read: float) -> None:
        """An answer that took ``service`` seconds arrived at ``arrived`` and was read at
        ``read``. ``arrived`` None: it had waited unseen, so it may have come right
        behind the previous EOP — as doubtful as one that did."""
        # in doubt already: nothing to decide (a single-mode stage answers per message)
        if not self.doubt and (arrived is None or doubtful_answer(service, arrived - self.previous_eop, self.service)):
            self.doubt = True
        self.service.append(service)
        self.previous_eop = read if arrived is None else arrived

    def settle(self) -> float:
        """How long the worker, nothing outstanding, stays quiet for one quiet check (in
        doubt, each of two): never longer than ``RAPID`` without doubt, so a fast worker's
        window ends no later than before."""
        full = settle_time(self.service)
        return full if self.doubt else min(full, RAPID)

    def checks(self) -> int:
        """Quiet checks that confirm the answers since the last confirmation: two once one
        gave cause for doubt (a stray EOP's late real answer may show only after the first),
        else one."""
        return 2 if self.doubt else 1


__all__ = [
    "ISOLATING",
    "MAX_SETTLE",
    "MIN_SETTLE",
    "RAPID",
    "STARTUP_POLL",
    "STARTUP_QUIET",
    "Pace",
    "Restarts",
    "Verdict",
    "after_failure",
    "answer_deadline",
    "batch_cut",
    "batch_full",
    "broken_command",
    "doubtful_answer",
    "in_step_first",
    "may_write",
    "next_delay",
    "settle_time",
]
