"""What a failed worker's jobs become, written once for both engines: pure, no I/O.

When a worker fails, two kinds of job go out again to its replacement:

- the jobs it had **answered** since it was last known to be in step (held for
  confirmation): their answers may sit on the wrong requests, so they are sent again,
  and none of them is charged a try;
- the jobs it had **not answered**: the oldest of them (the head, the one the worker was
  working on) is charged a try, and :func:`policy.after_failure` gives the verdict —
  send it again, isolate its messages (each alone, one last try), or set it aside as a
  dead letter (under ``on_failure: fail``, the run stops there).

Blame stays exact: a job charged a try is written to the replacement only once the
worker is known to be in step with what goes before it (:func:`policy.in_step_first`) —
an isolated message alone, and a charged job sent behind answered ones only once those
are answered again and confirmed. Otherwise a replacement that fails on an answered job
(its answer was a stray EOP's) would charge the next try to the job behind it.

The supervisor (``runtime/driver.py``) and the Spark task (``spark/tasks/conversation.py``)
call :func:`recover`; each says how to split a job into single messages (its data model)
and does the I/O: logging the isolation, writing the dead letter, restarting.

>>> from dataclasses import dataclass
>>> from etlstage.config.model import RestartPolicy, StageConfig
>>> from etlstage.errors import WorkerGone
>>> from etlstage.protocol.markers import Markers
>>> from etlstage.protocol.replies import Exchange
>>> from etlstage.protocol.vocabulary import Mode, OnFailure, StageType
>>> @dataclass(eq=False)
... class J(Exchange):
...     name: str = ""
...     batch: bool = True
...     attempts: int = 0
...     alone: bool = False
...     after_confirmation: bool = False
>>> st = StageConfig("t", StageType.T, ["w"], Mode.BATCH, Markers(), on_failure=OnFailure.DEADLETTER,
...                  restart=RestartPolicy(max_restarts=1))
>>> split = lambda j: [J(name=f"{j.name}.{i}", messages=1) for i in range(j.messages)]
>>> held, head, rest = J(name="a"), J(name="b", messages=2), J(name="c")
>>> r = recover(st, [held], [head, rest], WorkerGone("exited"), split)
>>> r.verdict.value, [j.name for j in r.again], head.attempts, head.after_confirmation
('resend', ['a', 'b', 'c'], 1, True)
>>> r = recover(st, [], [head, rest], WorkerGone("exited"), split)
>>> r.verdict.value, [(j.name, j.attempts, j.alone) for j in r.again]
('isolate', [('b.0', 1, True), ('b.1', 1, True), ('c', 0, False)])
>>> single = r.again[0]
>>> single.attempts += 1  # its last try failed too
>>> r = recover(st, [], [single], WorkerGone("exited"), split)
>>> r.verdict.value, r.dead is single, r.again
('deadletter', True, [])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from etlstage.config.model import StageConfig
from etlstage.conversation.policy import Verdict, after_failure
from etlstage.errors import WorkerError


class Retried(Protocol):
    """What :func:`recover` needs of a job (both engines' jobs are reply-rule exchanges)."""

    attempts: int
    messages: int
    batch: bool
    alone: bool
    after_confirmation: bool

    def reset(self) -> None: ...


J = TypeVar("J", bound=Retried)


@dataclass
class Recovery(Generic[J]):
    taken_back: list[J]  # answered but not known in step: sent again first, uncharged
    resend: list[J]  # the unanswered, the head isolated into singles or left out as dead
    verdict: Verdict | None  # on the head; None when nothing was unanswered
    dead: J | None = None  # the head, out of tries under deadletter: the caller sets it aside

    @property
    def again(self) -> list[J]:
        """Everything to write to the replacement, in this order."""
        return [*self.taken_back, *self.resend]


def recover(
    stage: StageConfig,
    answered: Sequence[J],
    unanswered: Sequence[J],
    error: WorkerError,
    split: Callable[[J], list[J]],
) -> Recovery[J]:
    """The jobs of a worker that failed with ``error``: each forgets its partial answer,
    the head of ``unanswered`` is charged a try and judged (:func:`after_failure`, which
    raises under ``on_failure: fail``).  ``split(job)``: the job's messages as jobs of one
    message each (isolation gives them one last try, alone)."""
    for job in (*answered, *unanswered):
        job.reset()
    if not unanswered:
        return Recovery(list(answered), [], None)
    head, rest = unanswered[0], list(unanswered[1:])
    head.attempts += 1
    verdict = after_failure(stage, head.attempts, head.messages, head.batch, error)
    if verdict == Verdict.RESEND:
        resend = [head, *rest]
    elif verdict == Verdict.ISOLATE:
        singles = split(head)
        for single in singles:
            single.attempts = stage.restart.max_restarts  # one more failure makes it a dead letter
            single.alone = True  # nothing else in flight beside it: the blame is exact
        resend = [*singles, *rest]
    else:
        resend = rest
    if answered and resend:
        resend[0].after_confirmation = True  # behind answered jobs: written once they are in step
    return Recovery(list(answered), resend, verdict, dead=head if verdict == Verdict.DEADLETTER else None)


__all__ = ["Recovery", "Retried", "recover"]
