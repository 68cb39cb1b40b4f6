"""One worker process's conversation as a state machine: bytes and times in, what they mean out.

Both engines hold one of these per worker process — the supervisor's session over
asyncio (:mod:`etlstage.runtime.session`, ``driver``), the Spark task's worker over
blocking reads (:mod:`etlstage.spark.tasks.conversation`, ``extract``) — and keep to the
I/O: they write the jobs, hand in the bytes they read with the time, wait until the time
it names, start and kill processes.  What the bytes mean, and what may be written next,
is decided here, once, for both:

- the worker's output, parsed (:class:`ReplyParser`) and matched to the jobs outstanding
  (:class:`ReplyRules`): the jobs answered in full, or the violation (:meth:`heard`,
  :meth:`answers`); each answer's time goes to the :class:`~policy.Pace` that the
  confirmation reads;
- the time limit now running and its name (:meth:`deadline`), and what an early end of
  output means (:meth:`went_early`);
- the start-up quiet: how much longer a fresh worker is watched before its first request
  (:meth:`startup_left`), and whether its exit is a broken command (:meth:`broken`);
- whether the next job may be written: a slot among ``jobs_in_flight`` (:meth:`has_slot`),
  room within ``replay_bytes`` (:meth:`has_room`), and, for a job that waits until the
  worker is in step, nothing before it unconfirmed (:meth:`must_wait_in_step`).

No I/O, no clock, no logging: the caller passes ``now`` (``time.monotonic()``), and the
rules are :mod:`etlstage.conversation.policy`'s.  What each engine still applies on its own
(and why) is listed in docs/architecture.md.

>>> from etlstage.config.model import StageConfig, Timeouts
>>> from etlstage.conversation.job import Job, Messages
>>> from etlstage.protocol.markers import Markers
>>> from etlstage.protocol.vocabulary import Mode, StageType
>>> stage = StageConfig("t", StageType.T, ["w"], Mode.BATCH, Markers(), batch_size=2)
>>> conv = Conversation(stage.scenario(0, "/tmp"), Timeouts(request=5), 1 << 20, results=True, started=0.0)
>>> conv.startup_left(0.1, waiting=False), conv.startup_left(0.1, waiting=True)
(0.19999999999999998, 0)
>>> job = Job(pieces=[Messages(b"a\\nb\\n", 2)], batch=True)
>>> conv.sent(job)
>>> conv.deadline()[1], conv.unanswered_bytes, conv.has_room(8, replay_bytes=10)
('start-up timeout of 120s', 4, False)
>>> answer = b"A\\nB\\n" + stage.markers.EOP
>>> reading = conv.answers(conv.heard(answer, now=1.0), now=1.0, arrived=1.0)
>>> [j is job for j in reading.completed], job.results, conv.unanswered_bytes, conv.answered
([True], [b'A\\nB\\n'], 0, 1)
>>> conv.went_early()
'exited while waiting for work (its stdin was still open)'
"""

from __future__ import annotations

from collections import deque
from typing import Generic, Protocol, TypeVar

from etlstage.config.model import Timeouts
from etlstage.conversation import policy
from etlstage.errors import WorkerError
from etlstage.protocol.framing import ReplyParser, Token
from etlstage.protocol.replies import Outstanding, Reading, ReplyRules
from etlstage.protocol.scenario import Scenario


class Sized(Outstanding, Protocol):
    """What the machine reads of a job beside the reply rules' fields: its input's bytes,
    and whether it waits for the worker to be in step (:func:`policy.in_step_first`)."""

    size: int
    alone: bool
    after_confirmation: bool


J = TypeVar("J", bound=Sized)

EXITED_UNANSWERED = "exited with requests unanswered"
EXITED_WAITING = "exited while waiting for work (its stdin was still open)"


class Conversation(Generic[J]):
    """One worker process's side of the conversation: what was asked, what was answered."""

    def __init__(
        self,
        scenario: Scenario,
        timeouts: Timeouts,
        max_message_bytes: int,
        *,
        results: bool,
        started: float,
        worked: bool = False,
    ) -> None:
        """``results``: the worker answers with messages (a T-stage, an E-stage's cycles
        read as answers); ``started``: when the process started; ``worked``: a process
        of this instance answered a request before this one started."""
        self.scenario = scenario
        self.timeouts = timeouts
        self.parser = ReplyParser(
            scenario.markers,
            bnc_allowed=scenario.worker_driven,
            eop_allowed=scenario.has_requests,
            max_message_bytes=max_message_bytes,
        )
        self.rules: ReplyRules[J] = ReplyRules(
            results=results, worker_driven=scenario.worker_driven, batch_size=scenario.batch_size
        )
        self.outstanding: deque[J] = self.rules.outstanding
        self.pace = policy.Pace()  # the answers' times, and any cause to doubt they line up
        self.started = started
        self.last_output = started
        self.answered = 0  # requests this process answered in full
        self.asked = False  # a request was written to this process
        self.worked_before = worked
        self.unanswered_bytes = 0  # input written and not answered yet (bounded by replay_bytes)

    @property
    def worked(self) -> bool:
        """A process of this instance has answered a request (this one or an earlier one)."""
        return self.worked_before or self.answered > 0

    # --- events ----------------------------------------------------------------------------

    def sent(self, job: J) -> None:
        """``job`` is being written: its time limit runs from now if it is the oldest."""
        self.asked = True
        self.rules.sent(job)
        self.unanswered_bytes += job.size

    def grew(self, size: int) -> None:
        """A worker-driven batch took ``size`` more bytes of input, written ahead of its BNCs."""
        self.unanswered_bytes += size

    def heard(self, chunk: bytes, now: float) -> list[Token]:
        """Bytes the worker wrote, read at ``now``: the complete tokens in them (raises
        :class:`~etlstage.errors.ProtocolViolation` for bytes the protocol does not allow)."""
        self.last_output = now
        tokens = self.parser.feed(chunk)
        if tokens and not self.scenario.has_requests:
            self.answered += 1  # a plain E-worker's output: its start-up limit ends at its first
        return tokens

    def answers(self, tokens: list[Token], now: float, arrived: float | None) -> Reading[J]:
        """What ``tokens`` answered: the jobs answered in full, oldest first, and the
        violation that ended them, if any.  ``arrived``: when the bytes arrived (None:
        unseen, they had waited), which the pace reads to doubt an answer."""
        reading = self.rules.feed(tokens)
        for job in reading.completed:
            self.answered += 1
            self.unanswered_bytes -= job.size
            self.pace.answered(now - job.started, arrived, now)
        return reading

    def cycle_answered(self) -> None:
        """An E-stage's request ended with its EOP; its messages went on as they came,
        not through the reply rules (a cycle may answer millions)."""
        self.outstanding.clear()
        self.answered += 1

    # --- what it means ---------------------------------------------------------------------

    def deadline(self) -> tuple[float | None, str]:
        """The earliest time limit now running and its name (:func:`policy.answer_deadline`)."""
        return policy.answer_deadline(
            self.timeouts,
            has_requests=self.scenario.has_requests,
            head_started=self.outstanding[0].started if self.outstanding else None,
            answered=self.answered > 0,
            started=self.started,
            last_output=self.last_output,
        )

    def went_early(self) -> str:
        """What the worker did by ending its output while its stdin was open."""
        return EXITED_UNANSWERED if self.outstanding else EXITED_WAITING

    def broken(self, error: WorkerError, returncode: int | None) -> bool:
        """``error`` shows a broken command, not a bad message (:func:`policy.broken_command`)."""
        return policy.broken_command(error, asked=self.asked, worked=self.worked, returncode=returncode)

    def startup_left(self, now: float, *, waiting: bool) -> float:
        """How much longer the fresh worker is watched before its first request is written
        (0: no longer).  ``waiting``: it is seen waiting for input with nothing unread — it
        cannot write before it is asked, so the watch ends there."""
        if self.answered or self.outstanding or (waiting and not self.parser.pending_bytes):
            return 0
        return max(0.0, self.started + policy.STARTUP_QUIET - now)

    def has_slot(self, depth: int) -> bool:
        """Fewer than ``depth`` jobs outstanding (``jobs_in_flight``; worker-driven: one)."""
        return len(self.outstanding) < depth

    def has_room(self, size: int, *, replay_bytes: int) -> bool:
        """A job of ``size`` bytes may be written beside what is unanswered (:func:`policy.may_write`)."""
        return policy.may_write(self.unanswered_bytes, size, replay_bytes)

    def must_wait_in_step(self, job: J, *, unconfirmed: bool) -> bool:
        """``job`` waits: it is written only once nothing is outstanding and no answer is
        ``unconfirmed`` (:func:`policy.in_step_first`), and something is."""
        return policy.in_step_first(job) and bool(self.outstanding or unconfirmed)


__all__ = ["EXITED_UNANSWERED", "EXITED_WAITING", "Conversation", "Sized"]
