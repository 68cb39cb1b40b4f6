"""The one rule for a failed worker's jobs (etlstage.conversation.recovery), both engines' caller."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from etlstage.config.model import RestartPolicy, StageConfig
from etlstage.conversation.policy import Verdict
from etlstage.conversation.recovery import recover
from etlstage.errors import PipelineError, WorkerGone
from etlstage.protocol.markers import Markers
from etlstage.protocol.replies import Exchange
from etlstage.protocol.vocabulary import Mode, OnFailure, StageType


@dataclass(eq=False)
class FakeJob(Exchange):
    name: str = ""
    batch: bool = True
    attempts: int = 0
    alone: bool = False


def _stage(on_failure: OnFailure) -> StageConfig:
    return StageConfig(
        "t", StageType.T, ["w"], Mode.BATCH, Markers(), on_failure=on_failure, restart=RestartPolicy(max_restarts=2)
    )


def _split(job: FakeJob) -> list[FakeJob]:
    return [FakeJob(name=f"{job.name}.{i}", messages=1) for i in range(job.messages)]


def test_answered_jobs_go_first_uncharged_and_forget_their_partial_answers():
    answered, head = FakeJob(name="a"), FakeJob(name="b")
    answered.results.append(b"x")
    head.results.append(b"half")
    head.eops = 1
    r = recover(_stage(OnFailure.DEADLETTER), [answered], [head], WorkerGone("gone"), _split)
    assert [j.name for j in r.again] == ["a", "b"]
    assert (answered.attempts, head.attempts) == (0, 1)
    assert answered.results == [] and head.results == [] and head.eops == 0
    assert r.verdict == Verdict.RESEND and r.dead is None


def test_nothing_unanswered_charges_nothing():
    answered = FakeJob(name="a")
    r = recover(_stage(OnFailure.FAIL), [answered], [], WorkerGone("gone"), _split)
    assert r.verdict is None and r.again == [answered] and answered.attempts == 0


def test_under_fail_a_job_out_of_tries_stops_the_run():
    head = FakeJob(name="b", messages=3, attempts=2)
    with pytest.raises(PipelineError, match="failed 3 times; on_failure=fail"):
        recover(_stage(OnFailure.FAIL), [], [head], WorkerGone("gone"), _split)


def test_isolated_singles_take_the_heads_place_with_one_try_left_and_alone():
    head, rest = FakeJob(name="b", messages=2, attempts=2), FakeJob(name="c")
    r = recover(_stage(OnFailure.DEADLETTER), [], [head, rest], WorkerGone("gone"), _split)
    assert r.verdict == Verdict.ISOLATE
    assert [(j.name, j.attempts, j.alone) for j in r.again] == [("b.0", 2, True), ("b.1", 2, True), ("c", 0, False)]


def test_a_single_out_of_tries_is_the_dead_letter_and_the_rest_goes_on():
    head, rest = FakeJob(name="b.0", messages=1, attempts=2), FakeJob(name="c")
    r = recover(_stage(OnFailure.DEADLETTER), [], [head, rest], WorkerGone("gone"), _split)
    assert r.verdict == Verdict.DEADLETTER and r.dead is head and r.again == [rest]
