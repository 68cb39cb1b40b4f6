"""Answers held until a worker is in step (runtime.confirm): the rules without processes."""

from __future__ import annotations

import asyncio

from etlstage.conversation.policy import MAX_SETTLE, RAPID, settle_time
from etlstage.runtime.confirm import Unconfirmed
from etlstage.runtime.flow import Job, Piece, Window

LEVEL = 1


def answered(w: Window, held: Unconfirmed, text: bytes = b"m\n") -> Job:
    """A job of one message of ``w`` that passed this stage and was answered: held first,
    then its results handed on and its input let go at this level (as the T driver does)."""
    w.add(LEVEL, 1)
    job = Job(pieces=[Piece(text, 1, w)], requests=1, batch=False)
    held.pace.answered(0.001, None, 0.0)
    held.add(job)  # arrival unseen: doubtful, two checks
    w.release(LEVEL, 1)
    job.released = True
    return job


def run(coro_fn):  # Unconfirmed makes an asyncio.Event: build it inside a loop
    return asyncio.run(coro_fn())


def test_a_window_commits_only_after_two_quiet_checks():
    async def go() -> None:
        held = Unconfirmed(LEVEL, 1 << 20)
        w = Window("src", 0, 3)
        answered(w, held)
        w.close()
        assert held.due() and not w.done
        held.confirm()  # one quiet check: suspect, still held
        assert not w.done and held and not held.empty.is_set()
        held.confirm()  # the second: released
        assert w.done and not held and held.empty.is_set()

    run(go)


def test_a_clean_end_confirms_at_once():
    async def go() -> None:
        held = Unconfirmed(LEVEL, 1 << 20)
        w = Window("src", 0, 3)
        answered(w, held)
        w.close()
        held.confirm(proven=True)
        assert w.done and not held

    run(go)


def test_a_failure_after_one_quiet_check_sends_the_suspect_jobs_again():
    async def go() -> None:
        held = Unconfirmed(LEVEL, 1 << 20)
        w = Window("src", 0, 3)
        first = answered(w, held, b"a\n")
        held.confirm()
        second = answered(w, held, b"b\n")
        w.close()
        again = held.take_back()
        assert again == [first, second]
        assert w.live[LEVEL] == 2 and not w.held and not w.done

    run(go)


def test_a_failure_forgets_the_inputs_it_let_go_so_no_window_is_released_twice():
    async def go() -> None:
        held = Unconfirmed(LEVEL, 3)  # room for one job's input
        w = Window("src", 0, 3)
        answered(w, held, b"aa\n")
        second = answered(w, held, b"bb\n")  # the first lets its input go
        assert held.input_let_go()
        assert held.take_back() == [second]
        assert not held and not held.input_let_go() and held.empty.is_set()
        # the job goes again and is answered: its window waits for two quiet checks again,
        # and is released by them exactly once
        w.release(LEVEL, 1)
        held.pace.answered(0.001, None, 0.0)
        held.add(second)
        w.close()
        held.confirm()
        assert not w.done
        held.confirm()
        assert w.done and w.held == 0 and not held

    run(go)


def test_input_let_go_past_replay_bytes_is_known_for_suspect_jobs_too():
    async def go() -> None:
        held = Unconfirmed(LEVEL, 3)  # room for one job's input
        w = Window("src", 0, 3)
        answered(w, held, b"aa\n")
        answered(w, held, b"bb\n")  # the first lets its input go
        held.confirm()
        assert held.input_let_go()
        held.confirm()
        w.close()
        assert not held.input_let_go() and w.done

    run(go)


def test_the_committed_windows_of_the_last_release_on_quiet_are_named():
    async def go() -> None:
        held = Unconfirmed(LEVEL, 1 << 20)
        w0, w1 = Window("src", 0, 3), Window("src", 1, 3)
        answered(w0, held)
        w0.close()
        held.confirm()
        held.confirm()  # w0 released on quiet alone: done
        answered(w1, held)
        assert held.committed_on_quiet() == [w0]
        held.confirm()  # a check that releases nothing keeps the record
        assert held.committed_on_quiet() == [w0]
        held.confirm(proven=True)  # a clean end: nothing is in doubt
        assert held.committed_on_quiet() == []

    run(go)


def in_pace(w: Window, held: Unconfirmed, at: float, service: float = 1.5, text: bytes = b"m\n") -> Job:
    """A job of ``w`` answered after ``service`` seconds, seen arriving at ``at``."""
    w.add(LEVEL, 1)
    job = Job(pieces=[Piece(text, 1, w)], requests=1, batch=False)
    w.release(LEVEL, 1)
    held.pace.answered(service, at, at)
    held.add(job)
    return job


def test_answers_that_give_no_cause_for_doubt_are_released_by_one_short_check():
    """A slow worker in step (a loader taking 1.5 s a batch): its window's end waits one
    check of RAPID, not two of twice its slowest answer."""

    async def go() -> None:
        held = Unconfirmed(LEVEL, 1 << 20)
        w = Window("src", 0, 3)
        for k in range(3):
            in_pace(w, held, 100.0 + 1.5 * k)
        w.close()
        assert held.settle() == RAPID
        held.confirm()
        assert w.done and not held
        assert held.committed_on_quiet() == [w]  # released on quiet alone: a later shift names it

    run(go)


def test_an_answer_right_behind_the_previous_eop_holds_its_window_for_two_settle_times():
    async def go() -> None:
        held = Unconfirmed(LEVEL, 1 << 20)
        w = Window("src", 0, 3)
        in_pace(w, held, 100.0)
        in_pace(w, held, 100.0 + RAPID / 10)  # a stray EOP written with the answer before it
        w.close()
        assert held.settle() == settle_time([1.5, 1.5]) == MAX_SETTLE
        held.confirm()
        assert not w.done and held
        held.confirm()
        assert w.done and not held
        # every answer in doubt passed its checks: the next window's answers in pace need one
        w2 = Window("src", 1, 3)
        in_pace(w2, held, 110.0)
        w2.close()
        assert held.settle() == RAPID
        held.confirm()
        assert w2.done

    run(go)


def test_an_answer_in_a_fraction_of_the_usual_time_or_unseen_is_doubtful():
    async def go() -> None:
        fast = Unconfirmed(LEVEL, 1 << 20)
        w = Window("src", 0, 9)
        for k in range(5):
            in_pace(w, fast, 100.0 + 1.5 * k)
        assert not fast.pace.doubt
        in_pace(w, fast, 110.0, service=0.2)  # a stray EOP on its own, while the worker worked
        assert fast.pace.doubt

        unseen = Unconfirmed(LEVEL, 1 << 20)
        w2 = Window("src", 1, 9)
        in_pace(w2, unseen, 100.0)
        w2.add(LEVEL, 1)
        job = Job(pieces=[Piece(b"m\n", 1, w2)], requests=1, batch=False)
        w2.release(LEVEL, 1)
        unseen.pace.answered(1.5, None, 101.5)
        unseen.add(job)  # read from a queue: it may have come right behind
        assert unseen.pace.doubt

    run(go)


def test_a_job_cut_short_while_handing_on_is_sent_again_and_counted_once():
    """A failure while an answered job's results go on (waiting for room downstream): the
    job is held already, so it is sent again; its input was never let go at this level, so
    taking it back does not count it twice (its window would never end), and a later job
    over the replay budget does not push it out of reach."""

    async def go() -> None:
        held = Unconfirmed(LEVEL, 3)  # room for one one-message job of 2 bytes
        w = Window("src", 0, 3)
        done = answered(w, held, b"a\n")
        w.add(LEVEL, 1)
        cut = Job(pieces=[Piece(b"b\n", 1, w)], requests=1, batch=False)
        held.pace.answered(0.001, None, 0.0)
        held.add(cut)  # held; its results never all went on: not released
        later = answered(w, held, b"c\n")  # over the budget: the released first job goes, not ``cut``
        assert held.input_let_go()
        assert held.take_back() == [cut, later]
        assert w.live[LEVEL] == 2  # cut's one (never let go) and later's (taken back)
        assert not cut.released and not later.released
        assert done.released

    run(go)


def test_a_window_is_not_due_here_while_a_stage_before_still_holds_its_messages():
    """An L-stage (level 2) holding a job of a closed window: no quiet check is due while
    the T-stage (level 1) still has a message of that window; it is once the T let it go."""

    async def go() -> None:
        held = Unconfirmed(2, 1 << 20)
        w = Window("src", 0, 3)
        w.add(1, 1)  # one message still at the T
        w.add(2, 1)
        held.pace.answered(0.001, None, 0.0)
        held.add(Job(pieces=[Piece(b"m\n", 1, w)], requests=1, batch=False))
        w.release(2, 1)
        w.close()
        assert not held.due()
        w.release(1, 1)
        assert held.due()

    run(go)


def test_a_window_is_due_at_a_stage_it_has_passed_while_a_later_stage_still_works_on_it():
    """A T-stage (level 1) holding a job of a closed window it has passed: its quiet check
    is due although the L after it still has messages of the window (they wait on the
    T's confirmation to commit, not the other way round)."""

    async def go() -> None:
        held = Unconfirmed(1, 1 << 20)
        w = Window("src", 0, 3)
        answered(w, held)
        w.add(2, 1)  # its result at the L
        w.close()
        assert held.due()

    run(go)


def test_a_released_window_is_no_longer_due_here():
    """Once its jobs are confirmed, a window is no longer one this stage holds: ``due()``
    (confirm before more is sent) must stop naming it, or every later job waits for a
    quiet check it does not need (mutation seed 109: the count per window kept, or kept
    at zero, survived)."""

    async def go() -> None:
        held = Unconfirmed(LEVEL, 1 << 20)
        w = Window("src", 0, 3)
        answered(w, held)
        w.close()
        assert held.due()
        held.confirm(proven=True)
        assert w.done and not held.due() and not held.windows

    run(go)
