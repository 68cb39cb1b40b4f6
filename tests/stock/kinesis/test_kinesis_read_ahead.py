"""The Kinesis extractor reads the next cycle while the previous window loads: bounded,
committed only on the next request, lost and repeated nothing beyond at-least-once."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

import pytest
from etlstage_workers.kinesis.readahead import ReadAhead, Round
from etlstage_workers.kinesis.store import Commit

from tests.support.waiting import stays


def records(n: int) -> list[tuple[str, bytes]]:
    return [("k", json.dumps({"id": f"r{i}", "n": i}).encode()) for i in range(n)]


def ids(messages: list[bytes]) -> list[str]:
    return [json.loads(m)["id"] for m in messages]


def wait_for(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def parked(ahead: ReadAhead) -> bool:
    """The reader thread is blocked waiting on the buffer's condition: full, or (not eager)
    no request waiting. Only a take() or close() wakes it, so nothing is read meanwhile. (A
    condition's waiters are a CPython detail, the one way to see a thread blocked.)"""
    with ahead._cond:
        return bool(ahead._cond._waiters)  # type: ignore[attr-defined]


def args(stream: str, url: str, *extra: str) -> list[str]:
    return ["--stream", stream, "--endpoint-url", url, "--region", "us-east-1", "--idle-sleep", "0.05", *extra]


# --- ReadAhead with a scripted reader ----------------------------------------------------


class Source:
    """A stream of ``total`` messages read ``room`` at a time (capped per round), counting calls."""

    def __init__(self, total: int, per_round: int = 1000, delay: float = 0.0) -> None:
        self.total, self.per_round, self.delay = total, per_round, delay
        self.next = 0
        self.rounds = 0
        self.max_room = 0
        self.fail: BaseException | None = None

    def __call__(self, room: int) -> Round:
        self.rounds += 1
        self.max_room = max(self.max_room, room)
        time.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        n = min(room, self.per_round, self.total - self.next)
        got = [b"m%d" % i for i in range(self.next, self.next + n)]
        self.next += n
        commit = {"s": Commit("s", str(self.next), 0, True, False)} if n else {}
        return Round(got, commit, caught_up=self.next == self.total)


def test_the_buffer_never_holds_more_than_its_bound_and_reading_pauses_when_full() -> None:
    source = Source(total=10_000, per_round=7)
    ahead = ReadAhead(source, max_records=50, max_seconds=60, idle_sleep=0.01)
    try:
        wait_for(lambda: ahead.held == 50 and parked(ahead))
        assert ahead.held == 50 and ahead.peak == 50  # paused while full: no round until a take
        cycle = ahead.take()  # full: answered at once
        assert cycle.messages == [b"m%d" % i for i in range(50)]
        assert cycle.commits["s"].seq == "50"  # the position of the last message handed out
        wait_for(lambda: ahead.held == 50)
        assert ahead.take().messages[0] == b"m50"
        assert source.max_room == 50
    finally:
        ahead.close()


def test_a_backlog_is_answered_after_max_seconds_and_an_empty_cycle_only_after_a_fresh_round() -> None:
    source = Source(total=30, per_round=10, delay=0.2)  # slow: ~0.6 s to read everything
    ahead = ReadAhead(source, max_records=1000, max_seconds=0.3, idle_sleep=0.05)
    try:
        started = time.monotonic()
        first = ahead.take()  # not full, not caught up: answered once 0.3 s have passed
        assert 0.25 < time.monotonic() - started < 1.0
        assert 10 <= len(first.messages) < 30
        rest = []
        while len(first.messages) + len(rest) < 30:
            rest += ahead.take().messages
        rounds = source.rounds
        assert ahead.take().messages == []  # caught up: empty, after a round that began after the request
        assert source.rounds > rounds
    finally:
        ahead.close()


def test_a_reader_failure_reaches_the_next_request() -> None:
    source = Source(total=10)
    source.fail = RuntimeError("GetRecords went wrong")
    ahead = ReadAhead(source, max_records=5, max_seconds=1, idle_sleep=0.01)
    try:
        with pytest.raises(RuntimeError, match="GetRecords went wrong"):
            ahead.take()
    finally:
        ahead.close()


def test_without_read_ahead_nothing_is_read_until_a_request_waits() -> None:
    source = Source(total=100, per_round=10)
    ahead = ReadAhead(source, max_records=10, max_seconds=1, idle_sleep=0.01, eager=False)
    try:
        wait_for(lambda: parked(ahead))
        assert source.rounds == 0
        assert len(ahead.take().messages) == 10
        wait_for(lambda: parked(ahead))
        assert source.rounds == 1 and ahead.held == 0
    finally:
        ahead.close()


# --- the real worker against moto's server ----------------------------------------------------


def test_read_ahead_holds_at_most_its_bound_and_answers_from_it(
    emulator, stream, put_records, proxy, spawn, tmp_path
) -> None:
    s = stream(1)
    put_records(s, records(100))
    w = spawn(args(s, proxy.endpoint_url, "--max-records-per-cycle", "10"), str(tmp_path))
    assert ids(w.cycle()) == [f"r{i}" for i in range(10)]
    wait_for(lambda: proxy.records_served >= 20)  # the next cycle, read while "the window loads"
    assert stays(lambda: proxy.records_served == 20, 1.0)  # 10 handed out + 10 held: no more
    calls = len(proxy.get_records_calls)
    assert ids(w.cycle()) == [f"r{i}" for i in range(10, 20)]  # straight from the buffer
    assert proxy.records_served <= 30 and len(proxy.get_records_calls) <= calls + 2
    db = sqlite3.connect(tmp_path / "kinesis.sqlite")
    (committed,) = db.execute("SELECT seq FROM shards").fetchone()
    assert int(committed) == 10  # the first window's last record only (moto numbers from 1)


def test_sigkill_while_holding_read_ahead_records_loses_and_repeats_nothing_unacknowledged(
    emulator, stream, put_records, proxy, spawn, tmp_path
) -> None:
    s = stream(2)
    put_records(s, [(f"k{i % 7}", data) for i, (_, data) in enumerate(records(300))])
    worker_args = args(s, proxy.endpoint_url, "--max-records-per-cycle", "40")
    w = spawn(worker_args, str(tmp_path))
    acknowledged = ids(w.cycle())  # window 1
    window = ids(w.cycle())  # this request acknowledged window 1; window 2 is open
    served = proxy.records_served
    wait_for(lambda: proxy.records_served >= served + 40)  # window 3 held in memory
    w.kill()  # window 2 was never acknowledged, window 3 never emitted
    assert len(acknowledged) == len(window) == 40

    w = spawn(worker_args, str(tmp_path))
    delivered = []
    while True:
        got = ids(w.cycle())
        if not got:
            break
        delivered += got
    assert w.close_stdin() == 0
    everything = [f"r{i}" for i in range(300)]
    assert sorted(acknowledged + delivered, key=lambda x: int(x[1:])) == sorted(everything, key=lambda x: int(x[1:]))
    assert set(delivered[: len(window)]) == set(window)  # the open window comes again first, whole
    assert not set(acknowledged) & set(delivered)  # nothing acknowledged is read again


def test_the_report_shows_what_is_held(emulator, stream, put_records, proxy, spawn, tmp_path) -> None:
    s = stream(1)
    put_records(s, records(50))
    w = spawn(args(s, proxy.endpoint_url, "--max-records-per-cycle", "20"), str(tmp_path))
    assert len(w.cycle()) == 20
    wait_for(lambda: proxy.records_served >= 40)  # the next 20 read ahead and held
    assert len(w.cycle()) == 20  # written with this cycle: what was held when it was answered
    [report] = [json.loads(p.read_text()) for p in tmp_path.glob("report-*.json")]
    assert report["records"] == 40 and report["read ahead"]["peak"] == 20


def test_bad_cycle_limits_are_refused_with_exit_2(emulator, stream, spawn, tmp_path) -> None:
    s = stream(1)
    for bad, message in (
        (["--max-records-per-cycle", "0"], "--max-records-per-cycle 0: expected >= 1"),
        (["--max-cycle-seconds", "-1"], "--max-cycle-seconds -1: expected 0..3600"),
    ):
        w = spawn(args(s, emulator.endpoint_url, *bad), str(tmp_path / bad[0]))
        assert w.close_stdin() == 2
        assert message in w.stderr()


def test_the_reader_thread_and_the_request_loop_share_the_store_safely(emulator, stream, put_records, tmp_path) -> None:
    """Many short cycles while the reader reads on: every record once, commits in order."""
    import io

    from etlstage_workers.kinesis.extractor import KinesisExtractor
    from etlstage_workers.kinesis.options import Options

    from etlstage.protocol import Scenario
    from etlstage.worker import serve

    s = stream(3)
    put_records(s, [(f"k{i}", data) for i, (_, data) in enumerate(records(600))])
    out = io.BytesIO()
    opts = Options(stream=s, endpoint_url=emulator.endpoint_url, region="us-east-1", idle_sleep=0.01,
                   max_records_per_cycle=25)  # fmt: skip
    serve(
        KinesisExtractor(opts),
        stdin=io.BytesIO(b"\n" * 40),
        stdout=out,
        scenario=Scenario(type="E", mode="cyclic", state_dir=str(tmp_path)),
    )
    windows = out.getvalue().split(b"\x00")[:-1]
    got = [m for w in windows for m in w.split(b"\n") if m]
    assert all(len([m for m in w.split(b"\n") if m]) <= 25 for w in windows)
    assert sorted(ids(got), key=lambda x: int(x[1:])) == [f"r{i}" for i in range(600)]


def test_a_backlog_on_uneven_shards_fills_the_cycle_in_one_round(emulator, stream, put_records, tmp_path) -> None:
    """What a short shard leaves of its share goes to the others at once: no runt window."""
    import io

    from etlstage_workers.kinesis.extractor import KinesisExtractor
    from etlstage_workers.kinesis.options import Options

    from etlstage.protocol import Scenario
    from etlstage.worker import serve

    s = stream(2)
    put_records(s, [("a" if i < 30 else "b", data) for i, (_, data) in enumerate(records(40))])
    out = io.BytesIO()
    opts = Options(stream=s, endpoint_url=emulator.endpoint_url, region="us-east-1", idle_sleep=0.01,
                   max_records_per_cycle=40, max_cycle_seconds=0)  # fmt: skip
    serve(
        KinesisExtractor(opts),
        stdin=io.BytesIO(b"\n\n"),
        stdout=out,
        scenario=Scenario(type="E", mode="cyclic", state_dir=str(tmp_path)),
    )
    first, second = out.getvalue().split(b"\x00")[:2]
    assert sorted(ids(first.split(b"\n")[:-1]), key=lambda x: int(x[1:])) == [f"r{i}" for i in range(40)]
    assert second == b""
