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

from etlstage.spark.tasks.prefetch import MAX_JOBS, NOT_READY, Prefetched, burst_room
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


def pulled_when_settled(pulled: list[int], wait: float = 5.0) -> int:
    """How many items the thread has pulled once it stopped pulling (blocked on room)."""
    deadline = time.monotonic() + wait
    seen = -1
    while time.monotonic() < deadline:
        if pulled[0] == seen:
            return seen
        seen = pulled[0]
        time.sleep(0.2)
    raise AssertionError(f"still pulling after {wait}s: {pulled[0]}")


def counting(pulled: list[int], n: int = 1000) -> Iterator[bytes]:
    for _ in range(n):
        pulled[0] += 1
        yield b"x" * 10


def test_without_room_in_bytes_only_depth_jobs_wait():
    pulled = [0]
    jobs = Prefetched(counting(pulled), "t", depth=2, size=len)
    try:
        assert pulled_when_settled(pulled) == 3  # two waiting, the third in hand
    finally:
        jobs.close()


def test_room_in_bytes_takes_a_whole_burst_while_the_consumer_is_busy():
    """An upstream T hands over all it confirmed at once: with room for it, its thread is
    back at its own worker while this stage still works (the two no longer take turns)."""
    pulled = [0]
    jobs = Prefetched(counting(pulled), "t", depth=2, max_bytes=100, size=len)
    try:
        assert pulled_when_settled(pulled) == 11  # ten waiting (100 bytes), the eleventh in hand
        assert jobs.take() == b"x" * 10
        assert pulled_when_settled(pulled) == 12  # room for one more
        got = [jobs.take() for _ in range(11)]
        assert got == [b"x" * 10] * 11  # in order, nothing lost or repeated
    finally:
        jobs.close()


def test_tiny_jobs_are_bounded_by_count_too():
    pulled = [0]
    jobs = Prefetched(counting(pulled, 10_000), "t", depth=2, max_bytes=1 << 30, size=len)
    try:
        assert pulled_when_settled(pulled) == MAX_JOBS + 1
    finally:
        jobs.close()


def test_the_sinks_room_holds_two_bursts_of_the_stage_in_front():
    assert burst_room(8 << 20) == 16 << 20


@pytest.mark.parametrize("room", [0, 2 << 20])
def test_a_conversation_pulls_its_input_ahead_by_bytes(tmp_path, room):
    """``ahead_bytes`` reaches the conversation's input: its results not taken (the stage
    behind busy), with 2 MiB of room it has pulled all of its 800 kB input; without, a few
    jobs beyond what it fed before its first confirmation."""
    worker = t_worker(tmp_path, [sys.executable, str(FIXTURES / "tw.py"), "upper"], batch_size=1000, replay_bytes=4000)
    pulled = [0]

    def blocks() -> Iterator[bytes]:
        for _ in range(400):
            pulled[0] += 1
            yield b"a\nb\n" * 500  # a job of 1,000 messages, 2 kB

    try:
        results = worker.transform(blocks(), ahead=True, ahead_bytes=room)
        assert next(results) == b"A\nB\n" * 500  # the first confirmed results; the rest stay untaken
        if room:
            assert pulled_when_settled(pulled) == 400
        else:
            assert pulled_when_settled(pulled) < 20
        results.close()
    finally:
        worker.stop()


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
