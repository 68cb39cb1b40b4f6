"""The conversation rules both engines follow (etlstage.conversation.policy), on their own."""

from __future__ import annotations

import random

import pytest

from etlstage.config.model import RestartPolicy, StageConfig, Timeouts
from etlstage.conversation import policy
from etlstage.errors import PipelineError, WorkerGone
from etlstage.protocol.markers import Markers
from etlstage.protocol.vocabulary import Mode, OnFailure, StageType


def stage(**kw) -> StageConfig:
    return StageConfig("t", StageType.T, ["w"], Mode.BATCH, Markers(), **kw)


def test_backoff_doubles_from_the_first_failure_up_to_its_maximum():
    r = RestartPolicy(backoff=0.5, backoff_max=4)
    assert [policy.next_delay(r, n) for n in range(1, 7)] == [0.5, 1, 2, 4, 4, 4]


def test_failures_in_a_row_count_charged_ones_but_only_unblamed_ones_stop_the_run():
    r = policy.Restarts(RestartPolicy(max_restarts=2, backoff=1, backoff_max=100), "t")
    gone = WorkerGone("t exited")
    assert r.failed(gone, charged=1)[0] == 1
    assert r.failed(gone, charged=2)[0] == 2
    assert r.failed(gone, charged=3)[0] == 4  # a job out of tries: on_failure decides, not this
    with pytest.raises(PipelineError, match="t failed 4 times in a row"):
        r.failed(gone)
    r.succeeded()
    delay, note = r.failed(gone)
    assert (delay, note) == (1, "t failed (t exited); restart 1 of at most 2 in a row in 1.0s")


def test_a_job_out_of_tries_is_isolated_dead_lettered_or_stops_the_pipeline():
    gone = WorkerGone("x")
    dl = stage(on_failure=OnFailure.DEADLETTER, restart=RestartPolicy(max_restarts=1))
    assert policy.after_failure(dl, 1, 5, True, gone) == policy.Verdict.RESEND
    assert policy.after_failure(dl, 2, 5, True, gone) == policy.Verdict.ISOLATE
    assert policy.after_failure(dl, 2, 1, True, gone) == policy.Verdict.DEADLETTER
    fail = stage(restart=RestartPolicy(max_restarts=1))
    assert policy.after_failure(fail, 1, 5, True, gone) == policy.Verdict.RESEND
    with pytest.raises(PipelineError, match=r"a batch of 5 message\(s\) failed 2 times; on_failure=fail stops"):
        policy.after_failure(fail, 2, 5, True, gone)


def deadline(t: Timeouts, **kw):
    args = {"has_requests": True, "head_started": None, "answered": False, "started": 0.0, "last_output": 0.0}
    return policy.answer_deadline(t, **{**args, **kw})


def test_the_next_answer_is_due_by_the_earliest_limit_running():
    t = Timeouts(startup=10, request=5, idle=3)
    assert deadline(t, head_started=1.0) == (3.0, "idle timeout of 3s (no output)")
    assert deadline(t, head_started=1.0, last_output=50.0) == (11.0, "start-up timeout of 10s")
    assert deadline(t, head_started=1.0, answered=True, last_output=50.0) == (6.0, "request timeout of 5s")
    assert deadline(t) == (None, "")  # nothing outstanding: no limit runs
    assert deadline(Timeouts(startup=None, request=None)) == (None, "")


def test_a_plain_extractor_is_held_to_its_idle_limit_from_its_start():
    """No requests: start-up runs until the first output, idle all along (the Spark
    engine's copy skipped idle until the first output)."""
    t = Timeouts(startup=10, idle=3)
    assert deadline(t, has_requests=False) == (3.0, "idle timeout of 3s (no output)")
    assert deadline(Timeouts(startup=10), has_requests=False) == (10.0, "start-up timeout of 10s (no output yet)")
    assert deadline(t, has_requests=False, answered=True, last_output=7.0) == (10.0, "idle timeout of 3s (no output)")


def reference_jobs(sizes: list[int], want: int, max_bytes: int) -> list[list[int]]:
    """The batching rule, one message at a time, as the supervisor's inbox applies it."""
    jobs: list[list[int]] = []
    job: list[int] = []
    for size in sizes:
        if job and sum(job) + size > max_bytes:
            jobs.append(job)
            job = []
        job.append(size)
        if policy.batch_full(len(job), sum(job), want=want, max_bytes=max_bytes):
            jobs.append(job)
            job = []
    return jobs + ([job] if job else [])


def cut_jobs(blocks: list[list[int]], want: int, max_bytes: int) -> list[list[int]]:
    """The same, through batch_cut over blocks of messages (as the Spark task cuts them)."""
    jobs: list[list[int]] = []
    carry: list[int] = []
    for sizes in blocks:
        ends, pos = [], 0
        for s in sizes:
            pos += s
            ends.append(pos)
        first = 0
        while (
            cut := policy.batch_cut(ends, first, len(carry), sum(carry), want=want, max_bytes=max_bytes)
        ) is not None:
            jobs.append(carry + sizes[first:cut])
            carry, first = [], cut
        carry += sizes[first:]
    return jobs + ([carry] if carry else [])


@pytest.mark.parametrize("seed", range(200))
def test_cutting_blocks_closes_the_same_jobs_as_taking_messages_one_by_one(seed):
    rnd = random.Random(seed)
    sizes = [rnd.choice([1, 2, 3, 5, 8, 30]) for _ in range(rnd.randrange(0, 60))]
    want, max_bytes = rnd.randrange(1, 12), rnd.randrange(1, 40)
    blocks, rest = [], list(sizes)
    while rest:
        k = rnd.randrange(0, len(rest) + 1)
        blocks.append(rest[:k])
        rest = rest[k:]
    assert cut_jobs(blocks, want, max_bytes) == reference_jobs(sizes, want, max_bytes)


def test_more_is_written_within_the_replay_budget_or_when_nothing_is_unanswered():
    assert policy.may_write(0, 100, 10)
    assert policy.may_write(5, 5, 10)
    assert not policy.may_write(6, 5, 10)


def test_settle_time_is_twice_the_slowest_recent_answer_within_bounds():
    assert policy.settle_time([]) == policy.MIN_SETTLE
    assert policy.settle_time([0.1, 0.3]) == 0.6
    assert policy.settle_time([10.0]) == policy.MAX_SETTLE


def test_a_job_full_at_a_block_s_last_message_closes_in_that_block():
    """Full at the block's last message: the job closes now, not when the next block comes
    (a Spark task would otherwise hold a full batch for more input; mutation seed 109:
    `cut < len(ends)` survived the block-by-block comparison above, which ends the same)."""
    ends = [3, 6, 9]
    assert policy.batch_cut(ends, 0, 0, 0, want=3, max_bytes=100) == 3
    assert policy.batch_cut(ends, 1, 1, 3, want=3, max_bytes=100) == 3
    assert policy.batch_cut(ends, 0, 0, 0, want=5, max_bytes=9) == 3  # full by bytes there
    assert policy.batch_cut(ends, 0, 0, 0, want=4, max_bytes=100) is None
