"""The Spark task's conversation (spark.conversation.StageWorker) in this process, no JVM:
the stage keys it honours as the supervisor does (compared in test_parity.py)."""

from __future__ import annotations

import sys

from etlstage.config.model import RestartPolicy, StageConfig, Timeouts
from etlstage.protocol.markers import Markers
from etlstage.protocol.vocabulary import Mode, StageType
from etlstage.spark.conversation import StageWorker, worker_env
from tests.support.paths import FIXTURES


def transform(tmp_path, monkeypatch, **kw) -> tuple[list[bytes], int, int]:
    """(results, confirmations, most input bytes written and unanswered at once)."""
    stage = StageConfig(
        "t",
        StageType.T,
        [sys.executable, str(FIXTURES / "tw.py"), "upper"],
        Mode.BATCH,
        Markers(),
        batch_size=2,
        timeouts=Timeouts(startup=30, request=30),
        restart=RestartPolicy(max_restarts=0),
        **kw,
    )
    scenario = stage.scenario(0, str(tmp_path))
    worker = StageWorker(stage, scenario, worker_env(stage, scenario), None, "t")
    settles, unanswered = [], [0]
    settle, write = StageWorker._settle, StageWorker._write

    def counted_settle(self):
        settles.append(1)
        settle(self)

    def measured_write(self, job, *parts):
        write(self, job, *parts)
        unanswered[0] = max(unanswered[0], sum(len(j.block) for j in self.rules.outstanding))

    monkeypatch.setattr(StageWorker, "_settle", counted_settle)
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


def misbehaving(tmp_path, *faults: str) -> StageWorker:
    """A T-stage worker (tests/fixtures/misbehave.py) that misbehaves once as ``faults`` say;
    each batch confirmed before the next is written (``replay_bytes``: one batch)."""
    (tmp_path / "flags").mkdir()
    stage = StageConfig(
        "t",
        StageType.T,
        [sys.executable, str(FIXTURES / "misbehave.py"), str(tmp_path / "flags"), *faults],
        Mode.BATCH,
        Markers(),
        batch_size=2,
        replay_bytes=10,
        timeouts=Timeouts(startup=30, request=30),
        restart=RestartPolicy(max_restarts=3, backoff=0.01),
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
