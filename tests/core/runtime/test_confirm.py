"""Answers held until a worker is in step (runtime.confirm): the rules without processes."""

from __future__ import annotations

import asyncio

from etlstage.runtime.confirm import Unconfirmed
from etlstage.runtime.flow import Job, Piece, Window

LEVEL = 1


def answered(w: Window, held: Unconfirmed, text: bytes = b"m\n") -> Job:
    """A job of one message of ``w`` that passed this stage and was answered."""
    w.add(LEVEL, 1)
    job = Job(pieces=[Piece(text, 1, w)], requests=1, batch=False)
    w.release(LEVEL, 1)
    held.add(job, 0.001)
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
