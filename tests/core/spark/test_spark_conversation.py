"""The Spark task's conversation (spark.conversation.StageWorker) in this process, no JVM:
the stage keys it honours as the supervisor does (compared in test_parity.py)."""

from __future__ import annotations

import sys
import time

import pytest

from etlstage.config.model import RestartPolicy, StageConfig, Timeouts
from etlstage.errors import EtlstageError
from etlstage.kit.transport import worker_env
from etlstage.protocol.markers import Markers
from etlstage.protocol.vocabulary import BatchDriver, Mode, OnFailure, StageType
from etlstage.spark.tasks.conversation import StageWorker
from tests.support.paths import FIXTURES


def t_worker(tmp_path, argv: list[str], **keys) -> StageWorker:
    """A T-stage's conversation in batches of 2 (instance 0), ``keys`` overriding the stage's."""
    stage = StageConfig(
        "t",
        StageType.T,
        argv,
        Mode.BATCH,
        Markers(),
        **{
            "batch_size": 2,
            "timeouts": Timeouts(startup=30, request=30),
            "restart": RestartPolicy(max_restarts=0),
            **keys,
        },
    )
    scenario = stage.scenario(0, str(tmp_path))
    return StageWorker(stage, scenario, worker_env(stage, scenario), None, "t")


def transform(tmp_path, monkeypatch, **kw) -> tuple[list[bytes], int, int]:
    """(results, confirmations, most input bytes written and unanswered at once)."""
    worker = t_worker(tmp_path, [sys.executable, str(FIXTURES / "tw.py"), "upper"], **kw)
    settles, unanswered = [], [0]
    settle, write = StageWorker._confirm, StageWorker._write

    def counted_settle(self, held):
        settles.append(1)
        settle(self, held)

    def measured_write(self, job, *parts):
        write(self, job, *parts)
        unanswered[0] = max(unanswered[0], sum(len(j.block) for j in self.conv.outstanding))

    monkeypatch.setattr(StageWorker, "_confirm", counted_settle)
    monkeypatch.setattr(StageWorker, "_write", measured_write)
    try:
        out = b"".join(worker.transform(iter([b"".join(b"m%03d\n" % i for i in range(20))])))
    finally:
        worker.stop()
    return out.split(b"\n")[:-1], len(settles), unanswered[0]


def test_answers_are_held_unconfirmed_and_written_ahead_within_replay_bytes(tmp_path, monkeypatch):
    """replay_bytes bounds what a task holds for a resend: input written and unanswered
    (more waits), and answers not yet known to be in step (feeding pauses to confirm them)."""
    results, settles, unanswered = transform(tmp_path, monkeypatch, replay_bytes=10)  # one batch of 2 x 5 bytes
    assert results == [b"M%03d" % i for i in range(20)]
    assert settles == 10  # each batch confirmed before the next is written
    assert unanswered == 10
    results, settles, unanswered = transform(tmp_path, monkeypatch)  # 8 MiB: everything in one go
    assert results == [b"M%03d" % i for i in range(20)]
    assert settles == 1
    assert unanswered == 20  # prefetch: two batches written ahead


def misbehaving(tmp_path, *faults: str, **keys) -> StageWorker:
    """A T-stage worker (tests/fixtures/misbehave.py) that misbehaves once as ``faults`` say;
    each batch confirmed before the next is written (``replay_bytes``: one batch)."""
    (tmp_path / "flags").mkdir()
    stage = StageConfig(
        "t",
        StageType.T,
        [sys.executable, str(FIXTURES / "misbehave.py"), str(tmp_path / "flags"), *faults],
        Mode.BATCH,
        Markers(),
        **{
            "batch_size": 2,
            "replay_bytes": 10,
            "timeouts": Timeouts(startup=30, request=30),
            "restart": RestartPolicy(max_restarts=3, backoff=0.01),
            **keys,
        },
    )
    scenario = stage.scenario(0, str(tmp_path))
    return StageWorker(stage, scenario, worker_env(stage, scenario), None, "t")


def run_through(worker: StageWorker, n: int = 20) -> list[bytes]:
    try:
        out = b"".join(worker.transform(iter([b"".join(b"m%03d\n" % i for i in range(n))])))
    finally:
        worker.stop()
    return out.split(b"\n")[:-1]


def test_a_failure_reaches_the_driver_when_it_happens(tmp_path):
    """The tally is published at each failure, not only at the task's end: the driver's
    status shows a restarting stage while the task still runs."""
    worker = misbehaving(tmp_path, "crash@3")
    published: list[int] = []
    worker.report = lambda: published.append(worker.tally.stats.restarts)
    assert sorted(run_through(worker)) == [b"m%03d" % i for i in range(20)]
    assert published == [1]


def test_an_answer_that_comes_while_the_worker_settles_is_read_then(tmp_path):
    """Nothing outstanding, the task reads on for the settle time (twice the slowest recent
    answer): a stray EOP found then shows the worker out of step (a restart, the held
    answers sent again), instead of being taken later for the answer to the next batch,
    which would lose that batch's messages."""
    worker = misbehaving(tmp_path, "slow@1", "late@1")  # answer 1 half a second late, its stray 0.1 s after
    results = run_through(worker, 6)  # each later batch settles a second: three batches
    assert sorted(results) == [b"m%03d" % i for i in range(6)]
    assert worker.tally.stats.restarts == 1


def test_the_tally_names_every_worker_process_started(tmp_path):
    """The driver's status shows each worker's memory and CPU by its pid: a restarted
    worker's new process is listed beside the first."""
    worker = misbehaving(tmp_path, "crash@3")
    pids: list[int] = []
    run = worker._ensure

    def ensure():
        proc = run()
        if proc.pid not in pids:
            pids.append(proc.pid)
        return proc

    worker._ensure = ensure  # type: ignore[method-assign]
    assert len(run_through(worker)) == 20
    assert len(pids) == 2 and worker.tally.stats.pids == pids
    assert worker.tally.starts == 2  # each process started here counts (a handed-over one would not)
    assert worker.tally.stats.jobs == 10  # each batch of 2 answered once, timed
    assert worker.tally.stats.latency.cumulative()[-1][1] == 10


def test_a_worker_with_answers_held_is_not_handed_over(tmp_path, monkeypatch):
    """A worker is handed to another Spark Python process only when nothing of its
    conversation is unfinished here: answers held for confirmation stay with this task."""
    from etlstage.spark.tasks.process import WorkerProcess

    class Owner:
        address = "the new owner"
        released = False

        def release(self) -> None:
            self.released = True

    worker = misbehaving(tmp_path)
    proc = worker._ensure()
    handed: list[str] = []
    monkeypatch.setattr(WorkerProcess, "hand_over", lambda self, address: handed.append(address) or True)
    owner = Owner()
    worker.ownership = owner  # type: ignore[assignment]
    try:
        worker._held = [object()]  # type: ignore[list-item]
        assert worker.hand_over() is False and handed == []
        worker._held = []
        assert worker.hand_over() is True and handed == ["the new owner"] and owner.released
        owner.released = False
        worker.stop()  # the worker is the new owner's now: this task's stop leaves it and the lock alone
        assert proc.proc.poll() is None and not owner.released
    finally:
        proc.kill()
        worker.stop()


def test_a_worker_driven_batch_closes_before_batch_bytes_and_sends_each_message_once(tmp_path):
    """The worker asks for more (BNC); a message that would take the batch over
    ``batch_bytes`` starts the next batch instead, and goes out once."""
    worker = misbehaving(tmp_path, batch_size=10, batch_driver=BatchDriver.WORKER, batch_bytes=12, replay_bytes=1 << 20)
    assert run_through(worker) == [b"m%03d" % i for i in range(20)]
    assert worker.tally.stats.restarts == 0


def test_a_failed_batch_is_isolated_one_message_at_a_time_and_only_the_culprit_is_a_dead_letter(tmp_path, monkeypatch):
    """A batch that fails every try is split into its messages, each written alone (nothing
    else in flight nor held unconfirmed beside it): the one that kills the worker is the
    dead letter, and every other message is answered once."""
    worker = t_worker(
        tmp_path,
        [sys.executable, str(FIXTURES / "tw.py"), "poison", "m002"],
        batch_size=4,
        restart=RestartPolicy(max_restarts=1, backoff=0.01),
        on_failure=OnFailure.DEADLETTER,
    )
    dead: list[bytes] = []
    worker.deadletter = lambda st, job, error: dead.append(job.block)
    beside: list[tuple[int, int]] = []  # for each message written alone: (in flight, held) beside it
    write = StageWorker._write

    def watched_write(self, job, *parts):
        if job.alone:
            beside.append((len(self.conv.outstanding), len(self._held.jobs) if self._held else 0))
        write(self, job, *parts)

    monkeypatch.setattr(StageWorker, "_write", watched_write)
    results = run_through(worker, 8)
    assert dead == [b"m002\n"]
    assert beside == [(0, 0)] * 4, beside  # m000..m003, one try each
    assert sorted(results) == [b"m%03d" % i for i in range(8) if i != 2]


def test_a_worker_driven_stage_held_to_one_batch_of_replay_goes_on_to_the_end_of_its_input(tmp_path):
    """One job in flight (worker-driven) and replay_bytes of one batch: after each batch the
    task confirms it and goes on; it ends only once its input is exhausted."""
    worker = misbehaving(tmp_path, batch_driver=BatchDriver.WORKER)
    assert sorted(run_through(worker)) == [b"m%03d" % i for i in range(20)]


def test_a_worker_that_never_answers_its_first_request_meets_the_startup_limit(tmp_path):
    """Before its first answer a worker has timeouts.startup (here 1 s), not the longer
    request limit (60 s): the task fails within seconds, naming the start-up limit."""
    worker = t_worker(
        tmp_path, [sys.executable, "-c", "import time; time.sleep(120)"], timeouts=Timeouts(startup=1, request=60)
    )
    started = time.monotonic()
    with pytest.raises(EtlstageError, match="did not answer within its start-up timeout of 1s"):
        run_through(worker, 4)
    assert time.monotonic() - started < 20


def test_a_worker_whose_first_start_fails_ends_the_task_with_the_reason(tmp_path):
    """The first start fails before any job was sent: the restart policy gets the start's
    own error (its program named), nothing held or unanswered to send again."""
    missing = tmp_path / "no-such-program"
    worker = t_worker(tmp_path, [str(missing)], restart=RestartPolicy(max_restarts=1))
    try:
        with pytest.raises(EtlstageError, match="no-such-program") as failed:
            list(worker.transform(iter([b"m1\nm2\n"])))
    finally:
        worker.stop()
    assert "not found" in str(failed.value)


def test_a_worker_that_fails_again_and_again_is_restarted_after_pauses_that_double(tmp_path, monkeypatch):
    """The restart policy's back-off holds on the Spark side too: a worker killed by the
    same message on every try is started again after 0.2 s, then 0.4 s (not at once, in a
    loop), before its batch is isolated and the culprit set aside."""
    import threading

    import etlstage.spark.tasks.conversation as conversation

    task = threading.get_ident()
    pauses: list[float] = []
    real_sleep = time.sleep

    def recorded(seconds: float) -> None:
        if threading.get_ident() == task and seconds >= 0.1:  # the task's own waits, not its polls
            pauses.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(conversation.time, "sleep", recorded)
    worker = t_worker(
        tmp_path,
        [sys.executable, str(FIXTURES / "tw.py"), "poison", "m002"],
        batch_size=4,
        restart=RestartPolicy(max_restarts=2, backoff=0.2, backoff_max=10),
        on_failure=OnFailure.DEADLETTER,
    )
    worker.deadletter = lambda st, job, error: None
    results = run_through(worker, 4)
    assert sorted(results) == [b"m000", b"m001", b"m003"]
    assert pauses[:2] == [0.2, 0.4], pauses


# answers one batch of 2 (upper-cased), then, once the task has settled, exits with status 0
# while its stdin is open
ONE_BATCH_THEN_EXIT = (
    "import os, sys, time\n"
    "a, b = sys.stdin.buffer.readline(), sys.stdin.buffer.readline()\n"
    "os.write(1, a.upper() + b.upper() + bytes([0]))\n"
    "time.sleep(1)\n"
)


@pytest.mark.parametrize("max_restarts", [0, 1])
def test_a_worker_gone_between_tasks_is_a_counted_failure_not_a_silent_replacement(tmp_path, max_restarts):
    """A reused worker that exited after its last task is found gone by the next one and the
    restart policy counts it, as the supervisor counts one that exits while waiting for work:
    with max_restarts=0 the next task fails on the restart limit, not on its batch's tries
    (the batch was never written to the gone worker); with 1 it is restarted once, counted."""
    worker = t_worker(
        tmp_path,
        [sys.executable, "-c", ONE_BATCH_THEN_EXIT],
        restart=RestartPolicy(max_restarts=max_restarts, backoff=0),
    )
    try:
        assert b"".join(worker.transform(iter([b"m1\nm2\n"]))) == b"M1\nM2\n"
        worker.proc.proc.wait(10)  # type: ignore[union-attr]
        if max_restarts == 0:
            with pytest.raises(
                EtlstageError,
                match=r"t failed 1 times in a row \(max_restarts=0\); last error: t exited while waiting for work",
            ):
                list(worker.transform(iter([b"m3\nm4\n"])))
        else:
            assert b"".join(worker.transform(iter([b"m3\nm4\n"]))) == b"M3\nM4\n"
    finally:
        worker.stop()
    assert worker.tally.starts == 2 if max_restarts else 1
    assert sum(worker.tally.stats.failures.values()) == 1


def test_once_a_worker_has_answered_its_requests_meet_the_request_limit_not_the_start_up_one(tmp_path):
    """Answer 3 comes half a second late against a request limit of 0.2 s (start-up: 30 s):
    the request limit applies, since the worker answered before; it is restarted once, and
    every message still comes through."""
    worker = misbehaving(
        tmp_path, "slow@3", timeouts=Timeouts(startup=30, request=0.2), restart=RestartPolicy(max_restarts=2, backoff=0)
    )
    assert len(run_through(worker)) == 20
    assert worker.tally.stats.failures == {"timeout": 1}
    assert [e for _, e in worker.tally.stats.last_errors] == ["t did not answer within its request timeout of 0.2s"]


def test_a_task_gives_each_batch_of_an_l_stage_its_id_by_its_place(tmp_path):
    """``batch_id: true`` on an L-stage: each batch a task cuts opens with the id of its
    place in the task and of its messages (the supervisor's rule, conversation/batchid.py);
    outside a Spark task the place's source is ``spark``."""
    from etlstage.conversation.batchid import batch_id

    stage = StageConfig(
        "l",
        StageType.L,
        [sys.executable, str(FIXTURES / "tw.py"), "ledger", str(tmp_path / "ledger")],
        Mode.BATCH,
        Markers(),
        batch_size=2,
        batch_id=True,
        timeouts=Timeouts(startup=30, request=30),
        restart=RestartPolicy(max_restarts=0),
    )
    scenario = stage.scenario(0, str(tmp_path))
    worker = StageWorker(stage, scenario, worker_env(stage, scenario), None, "l")
    try:
        assert list(worker.transform(iter([b"a\nb\nc\n", b"d\ne\n"]))) == []
    finally:
        worker.stop()
    got = [line.split()[0] for line in (tmp_path / "ledger" / "ids.log").read_text().splitlines()]
    blocks = [(0, b"a\nb\n"), (2, b"c\nd\n"), (4, b"e\n")]
    assert got == [batch_id(worker.pipeline, "l", 0, [("spark", 0, at)], block) for at, block in blocks]


def test_a_batch_is_said_to_be_tried_one_by_one_only_when_it_is(tmp_path, caplog):
    """A crash once (the batch's first failure) restarts and sends it again whole: no line
    says its messages are tried one by one; a batch that keeps failing is isolated, and
    that line says so once."""
    import logging

    with caplog.at_level(logging.WARNING, logger="etlstage"):
        assert sorted(run_through(misbehaving(tmp_path, "crash@3"))) == [b"m%03d" % i for i in range(20)]
    assert "one by one" not in caplog.text
    caplog.clear()
    (tmp_path / "again").mkdir()
    worker = t_worker(
        tmp_path / "again",
        [sys.executable, str(FIXTURES / "tw.py"), "poison", "m002"],
        batch_size=4,
        restart=RestartPolicy(max_restarts=1, backoff=0.01),
        on_failure=OnFailure.DEADLETTER,
    )
    worker.deadletter = lambda st, job, error: None
    with caplog.at_level(logging.WARNING, logger="etlstage"):
        assert sorted(run_through(worker, 8)) == [b"m%03d" % i for i in range(8) if i != 2]
    assert caplog.text.count("trying its messages one by one") == 1, caplog.text


POISONED_LEDGER = """\
import os, sys
from etlstage.worker import Loader, main
class Ledger(Loader):
    def load(self, messages):
        if b"m002" in messages:
            os._exit(7)
        with open(sys.argv[1], "a") as f:
            f.write(f"{self.batch_id} {b','.join(messages).decode()}\\n")
main(Ledger())
"""


def test_a_batch_isolated_under_batch_ids_gives_each_message_its_own_id(tmp_path):
    """An L-stage with ``batch_id: true`` whose batch keeps failing: its messages go one by
    one, each with the id of its own place and content, so none is taken for the batch
    (whose id would skip the rest once one of them loaded)."""
    from etlstage.conversation.batchid import batch_id

    script = tmp_path / "ledger.py"
    script.write_text(POISONED_LEDGER)
    stage = StageConfig(
        "l",
        StageType.L,
        [sys.executable, str(script), str(tmp_path / "ids.txt")],
        Mode.BATCH,
        Markers(),
        batch_size=4,
        batch_id=True,
        on_failure=OnFailure.DEADLETTER,
        timeouts=Timeouts(startup=30, request=30),
        restart=RestartPolicy(max_restarts=1, backoff=0.01),
    )
    scenario = stage.scenario(0, str(tmp_path))
    worker = StageWorker(stage, scenario, worker_env(stage, scenario), None, "l")
    worker.deadletter = lambda st, job, error: None
    try:
        assert list(worker.transform(iter([b"m000\nm001\nm002\nm003\n"]))) == []
    finally:
        worker.stop()
    loaded = dict(line.split(" ") for line in (tmp_path / "ids.txt").read_text().splitlines())
    want = {batch_id(worker.pipeline, "l", 0, [("spark", 0, k)], b"m%03d\n" % k): "m%03d" % k for k in (0, 1, 3)}
    assert loaded == want
