"""The conversation state machine alone: bytes and times in, what they mean out — no worker
process, no event loop, no Spark (etlstage/conversation/machine.py).  Both engines drive
this object; tests/core/conversation/test_parity.py runs the same rules end to end."""

from __future__ import annotations

import pytest

from etlstage.config.model import StageConfig, Timeouts
from etlstage.conversation import policy
from etlstage.conversation.confirmation import Confirmation
from etlstage.conversation.job import Job, Messages
from etlstage.conversation.machine import EXITED_UNANSWERED, EXITED_WAITING, Conversation
from etlstage.errors import ProtocolViolation, UnaskedReply, WorkerGone, WorkerTimeout
from etlstage.protocol.framing import EOP
from etlstage.protocol.markers import Markers
from etlstage.protocol.vocabulary import BatchDriver, Mode, StageType

M = Markers()
EOM, EOP_BYTE, BNC = M.EOM, M.EOP, M.BNC


def conversation(
    type: str = "T", mode: str = "batch", *, started: float = 0.0, worked: bool = False, **kw
) -> Conversation[Job[Messages]]:
    timeouts = kw.pop("timeouts", Timeouts(startup=10, request=5, idle=None))
    stage = StageConfig("s", StageType(type), ["w"], Mode(mode), M, timeouts=timeouts, **kw)
    scenario = stage.scenario(0, "/tmp")
    return Conversation(
        scenario, timeouts, stage.max_message_bytes, results=type != "L", started=started, worked=worked
    )


def batch(*messages: bytes, closed: bool = True) -> Job[Messages]:
    block = b"".join(m + EOM for m in messages)
    return Job(pieces=[Messages(block, len(messages))], batch=True, closed=closed)


def hear(conv: Conversation[Job[Messages]], data: bytes, now: float = 1.0, arrived: float | None = 1.0):
    return conv.answers(conv.heard(data, now), now, arrived)


def test_answers_are_matched_to_the_jobs_in_order_and_counted():
    conv = conversation(batch_size=2)
    first, second = batch(b"a", b"b"), batch(b"c")
    conv.sent(first)
    conv.sent(second)
    assert conv.unanswered_bytes == first.size + second.size == 6
    reading = hear(conv, b"A" + EOM + b"B" + EOM + EOP_BYTE + b"C" + EOM)
    assert reading.completed == [first] and first.results == [b"A" + EOM + b"B" + EOM]
    assert conv.answered == 1 and conv.unanswered_bytes == second.size and list(conv.outstanding) == [second]
    reading = hear(conv, EOP_BYTE)
    assert reading.completed == [second] and second.results == [b"C" + EOM]
    assert conv.unanswered_bytes == 0 and not conv.outstanding and conv.worked


def test_an_answer_with_nothing_outstanding_is_a_shift_not_an_answer():
    conv = conversation()
    reading = hear(conv, EOP_BYTE)
    assert reading.completed == [] and isinstance(reading.violation, UnaskedReply)


def test_an_l_worker_that_writes_a_result_breaks_the_protocol():
    conv = conversation("L")
    conv.sent(batch(b"a"))
    reading = hear(conv, b"x" + EOM + EOP_BYTE)
    assert reading.violation is not None and "L-workers answer with EOP only" in reading.violation.problem


def test_bytes_no_worker_may_write_are_raised_as_they_are_read():
    conv = conversation(max_message_bytes=10)
    conv.sent(batch(b"a"))
    with pytest.raises(ProtocolViolation, match="exceeds max_message_bytes=10"):
        conv.heard(b"x" * 11, 1.0)
    conv = conversation()
    conv.sent(batch(b"a"))
    with pytest.raises(ProtocolViolation, match="not in worker-driven batch mode"):
        conv.heard(BNC, 1.0)


def test_worker_driven_a_batch_is_answered_after_its_bncs_and_a_bnc_too_many_is_a_violation():
    conv = conversation(batch_size=3, batch_driver=BatchDriver.WORKER)
    job = batch(b"a", b"b", b"c", closed=True)  # filled: BNCs after the first two only
    conv.sent(job)
    assert hear(conv, BNC + BNC).completed == []
    assert hear(conv, b"ABC" + EOM + EOP_BYTE).completed == [job]
    conv.sent(batch(b"d", b"e", b"f"))
    reading = hear(conv, BNC + BNC + BNC)
    assert reading.violation is not None and "that message filled the batch" in reading.violation.problem


def test_worker_driven_an_eop_before_the_batch_is_closed_is_a_violation():
    conv = conversation(batch_size=3, batch_driver=BatchDriver.WORKER)
    conv.sent(batch(b"a", closed=False))  # more may come: the supervisor has not closed it
    reading = hear(conv, BNC + EOP_BYTE)
    assert reading.violation is not None and "expected BNC" in reading.violation.problem


def test_the_time_limit_running_is_start_up_then_request_and_none_with_nothing_asked():
    conv = conversation(timeouts=Timeouts(startup=10, request=5, idle=None))
    assert conv.deadline() == (None, "")  # a T with nothing outstanding: no limit runs
    first = batch(b"a")
    conv.sent(first)
    first.started = 1.0
    assert conv.deadline() == (11.0, "start-up timeout of 10s")  # before its first answer
    hear(conv, EOP_BYTE)
    second = batch(b"b")
    conv.sent(second)
    second.started = 20.0
    assert conv.deadline() == (25.0, "request timeout of 5s")


def test_the_idle_limit_runs_from_the_last_output_while_a_request_is_outstanding():
    conv = conversation(timeouts=Timeouts(startup=10, request=5, idle=3), started=0.0)
    job = batch(b"a", b"b")
    conv.sent(job)
    job.started = 1.0
    assert conv.deadline() == (3.0, "idle timeout of 3s (no output)")  # nothing written since its start
    hear(conv, b"A" + EOM, now=2.5)  # half an answer
    assert conv.deadline() == (5.5, "idle timeout of 3s (no output)")


def test_a_plain_extractors_start_up_limit_ends_at_its_first_output():
    conv = conversation("E", "plain", timeouts=Timeouts(startup=10, idle=None), started=0.0)
    assert conv.deadline() == (10.0, "start-up timeout of 10s (no output yet)")
    conv.heard(b"partial", 1.0)  # no complete message yet
    assert conv.deadline()[0] == 10.0
    conv.heard(b" message" + EOM, 2.0)
    assert conv.answered == 1 and conv.deadline() == (None, "")


def test_an_extractors_cycle_ends_with_its_eop():
    conv = conversation("E", "cyclic")
    cycle: Job[Messages] = Job(pieces=[Messages(b"{}" + EOM, 1)])
    conv.sent(cycle)
    assert conv.heard(b"m" + EOM + EOP_BYTE, 1.0) == [b"m" + EOM, EOP]
    conv.cycle_answered()
    assert not conv.outstanding and conv.answered == 1 and conv.went_early() == EXITED_WAITING


def test_the_start_up_quiet_runs_until_the_worker_waits_for_its_first_request():
    conv = conversation(started=100.0)
    assert conv.startup_left(100.1, waiting=False) == pytest.approx(policy.STARTUP_QUIET - 0.1)
    assert conv.startup_left(100.1 + policy.STARTUP_QUIET, waiting=False) == 0  # watched long enough
    assert conv.startup_left(100.1, waiting=True) == 0  # it cannot write before it is asked
    conv.heard(b"ban", 100.1)  # a banner begun: unread bytes, so waiting alone does not end it
    assert conv.startup_left(100.1, waiting=True) > 0
    asked = conversation(started=100.0)
    asked.sent(batch(b"a"))
    assert asked.startup_left(100.1, waiting=False) == 0  # its first request went: over


def test_an_exit_before_the_first_request_is_a_broken_command_only_if_no_process_worked():
    gone = WorkerGone("exited")
    conv = conversation()
    assert conv.broken(gone, returncode=2) is True
    assert conv.broken(gone, returncode=-9) is False  # a signal: the OOM killer, an operator
    assert conv.broken(WorkerTimeout("silent"), returncode=None) is False
    assert conversation(worked=True).broken(gone, returncode=2) is False  # an earlier process answered
    conv.sent(batch(b"a"))
    assert conv.broken(gone, returncode=2) is False  # asked: a message may be to blame
    assert conv.went_early() == EXITED_UNANSWERED


def test_the_next_job_waits_for_a_slot_room_and_for_the_worker_in_step():
    conv = conversation()
    first = batch(b"aaaa")  # 5 bytes
    assert conv.has_slot(1) and conv.has_room(100, replay_bytes=8)  # nothing outstanding: any job fits
    conv.sent(first)
    assert not conv.has_slot(1) and conv.has_slot(2)
    assert conv.has_room(3, replay_bytes=8) and not conv.has_room(4, replay_bytes=8)
    conv.grew(3)  # a worker-driven batch took 3 more bytes
    assert not conv.has_room(1, replay_bytes=8)
    retried = batch(b"b")
    retried.after_confirmation = True
    fresh = batch(b"c")
    assert conv.must_wait_in_step(retried, unconfirmed=False)  # something outstanding
    assert not conv.must_wait_in_step(fresh, unconfirmed=True)
    hear(conv, EOP_BYTE)
    held: Confirmation[Job[Messages]] = Confirmation(0, 1 << 20, conv.pace)
    held.add(first)
    assert conv.must_wait_in_step(retried, unconfirmed=bool(held))  # answered, not confirmed
    held.confirm()
    assert not conv.must_wait_in_step(retried, unconfirmed=bool(held))


def test_an_answer_right_behind_the_last_puts_the_confirmation_in_doubt():
    conv = conversation()
    held: Confirmation[Job[Messages]] = Confirmation(0, 1 << 20, conv.pace)
    first, second = batch(b"a"), batch(b"b")
    conv.sent(first)
    conv.sent(second)
    for job in hear(conv, EOP_BYTE, now=1.0, arrived=1.0).completed:
        held.add(job)
    assert not conv.pace.doubt and held.confirm() == 1 and not held  # one quiet check confirms
    for job in hear(conv, EOP_BYTE, now=1.1, arrived=1.1).completed:  # 0.1 s behind: a stray?
        held.add(job)
    assert conv.pace.doubt
    assert held.confirm() == 1 and held.jobs == [second]  # suspect after the first check
    assert held.confirm() == 0 and not held and not conv.pace.doubt  # released by the second


def test_an_answer_read_unseen_is_in_doubt():
    conv = conversation()
    conv.sent(batch(b"a"))
    hear(conv, EOP_BYTE, now=5.0, arrived=None)  # it had waited: it may have come right behind
    assert conv.pace.doubt
