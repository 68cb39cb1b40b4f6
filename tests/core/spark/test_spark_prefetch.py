"""A stage's jobs pulled ahead in a thread of their own (spark/tasks/prefetch.py): what the
sink's chain relies on — the input's order, an upstream failure raised where it was
raised, a thread that stops with its consumer — and why it is there: a conversation
waiting for its input reads its worker's answers meanwhile, so they do not look slow."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator

import pytest

from etlstage.spark.tasks.prefetch import NOT_READY, Prefetched
from tests.core.spark.test_spark_conversation import t_worker
from tests.support.paths import FIXTURES


def test_jobs_come_in_order_pulled_in_another_thread():
    pulled_in: set[str] = set()

    def items() -> Iterator[int]:
        for i in range(10):
            pulled_in.add(threading.current_thread().name)
            yield i

    jobs = Prefetched(items(), "t", depth=2)
    got = []
    while (job := jobs.take()) is not None:
        got.append(job)
    jobs.close()
    assert got == list(range(10))
    assert pulled_in == {"jobs of t"}
    assert jobs.take() is None  # ended stays ended


def test_nothing_yet_is_said_without_waiting_and_the_job_is_not_lost():
    release = threading.Event()

    def items() -> Iterator[str]:
        release.wait(10)
        yield "late"

    jobs = Prefetched(items(), "t")
    assert jobs.take(wait=False) is NOT_READY
    release.set()
    assert jobs.take() == "late"
    assert jobs.take() is None
    jobs.close()


def test_an_upstream_failure_is_raised_in_the_consumers_thread_after_what_came_before():
    def items() -> Iterator[int]:
        yield 1
        raise ValueError("upstream broke")

    jobs = Prefetched(items(), "t")
    assert jobs.take() == 1
    with pytest.raises(ValueError, match="upstream broke"):
        jobs.take()
    assert jobs.take() is None
    jobs.close()


def test_closing_stops_the_thread_at_its_next_item_and_closes_the_iterator():
    closed = threading.Event()

    def items() -> Iterator[int]:
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()

    jobs = Prefetched(items(), "t", depth=2)
    assert jobs.take() == 0
    jobs.close()
    assert closed.is_set()  # closed by the thread before close() returned
    assert not any(t.name == "jobs of t" for t in threading.enumerate())


def slow_input(gap: float) -> Iterator[bytes]:
    """A batch of 2 now, three more after ``gap`` seconds (the stage in front confirming)."""
    yield b"a\nb\n"
    time.sleep(gap)
    yield b"c\nd\ne\nf\ng\nh\n"


@pytest.mark.parametrize("ahead", [True, False])
def test_a_conversation_waiting_for_input_reads_its_workers_answers_meanwhile(tmp_path, ahead):
    """Without ``ahead`` the answer to the first batch lies unread while the input is
    awaited, and count as 1.5 s answers (settle times of 2 s follow); with it they are read
    as they come (the first batch is written, and a second may follow it: two jobs in flight)."""
    worker = t_worker(tmp_path, [sys.executable, str(FIXTURES / "tw.py"), "upper"])
    try:
        out = b"".join(worker.transform(slow_input(1.5), ahead=ahead))
        slowest = max(worker.conv.pace.service)
    finally:
        worker.stop()
    assert out == b"A\nB\nC\nD\nE\nF\nG\nH\n"
    if ahead:
        assert slowest < 0.75, slowest
    else:
        assert slowest >= 1.5, slowest  # the cost this module removes, seen
