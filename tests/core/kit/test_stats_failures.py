"""A stage's worker failures (kit.stats, ``StageStats.failed``): each counted once, by its
reason, beside the restarts and the instance it happened to (the figures behind
``etlstage_stage_worker_failures_total`` and the status document's ``failures``)."""

from __future__ import annotations

from etlstage.errors import WorkerError, WorkerGone, WorkerTimeout
from etlstage.kit.stats import StageStats


def test_each_failure_is_counted_once_by_its_reason_and_its_instance() -> None:
    stats = StageStats(name="t", type="T")
    stats.failed(WorkerGone("exited with status 3"), instance=0)
    stats.failed(WorkerGone("closed its stdout"), instance=1)
    stats.failed(WorkerTimeout("no answer within 30s"), instance=1)
    stats.failed(WorkerError("wrote an EOP before any request"))
    assert stats.failures == {"exit": 2, "timeout": 1, "violation": 1}
    assert stats.restarts == sum(stats.failures.values()) == 4
    assert [stats.instance(i).restarts for i in (0, 1)] == [1, 2]
    assert [detail for _, detail in stats.last_errors] == [
        "exited with status 3",
        "closed its stdout",
        "no answer within 30s",
        "wrote an EOP before any request",
    ]
