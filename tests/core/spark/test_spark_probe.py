"""The start-up probe (etlstage/spark/setup/spark_session.py, ``_probe_executors``): a cluster with
no free executor stops the start with the cause (exit 2) instead of hanging on the first
batch, also when the probe's job is submitted only after its deadline (a slow machine
planning the first query): a cancel that finds no job yet is tried again."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from etlstage.spark.setup import spark_session
from etlstage.spark.setup.spark_session import SparkStartError


class _Cluster:
    """A SparkContext and session stand-in whose probe job never gets an executor: it is
    submitted ``plan_seconds`` after ``count()`` is called and waits until cancelled."""

    def __init__(self, plan_seconds: float) -> None:
        self.plan_seconds = plan_seconds
        self.submitted = threading.Event()
        self.cancelled = threading.Event()
        self.cancels_without_a_job = 0
        self.sparkContext = self

    # SparkContext
    def setJobGroup(self, group: str, description: str, interruptOnCancel: bool = False) -> None:
        self.group = group

    def setLocalProperty(self, key: str, value: Any) -> None:
        pass

    def statusTracker(self) -> _Cluster:
        return self

    def getJobIdsForGroup(self, group: str) -> list[int]:
        return [1] if self.submitted.is_set() and group == self.group else []

    def cancelJobGroup(self, group: str) -> None:
        if self.submitted.is_set():
            self.cancelled.set()
        else:
            self.cancels_without_a_job += 1

    # SparkSession
    def range(self, *args: Any, **kwargs: Any) -> _Cluster:
        return self

    def count(self) -> int:
        time.sleep(self.plan_seconds)
        self.submitted.set()
        if not self.cancelled.wait(10):  # a job nobody cancels waits for an executor for ever
            return 2
        raise RuntimeError("Job 1 cancelled part of cancelled job group etlstage-probe")


@pytest.mark.parametrize("plan_seconds", [0.0, 0.8])
def test_a_cluster_without_a_free_executor_stops_the_start_even_when_the_job_comes_late(plan_seconds: float) -> None:
    cluster = _Cluster(plan_seconds)
    started = time.monotonic()
    with pytest.raises(SparkStartError, match="no executor ran a task within 0.3s"):
        spark_session._probe_executors(cluster, "spark://127.0.0.1:7077", 0.3)  # type: ignore[arg-type]
    assert time.monotonic() - started < plan_seconds + 3 * spark_session.PROBE_RECHECK
    assert cluster.cancels_without_a_job == 0  # no cancel while no job: Spark would warn for each


def test_a_probe_that_runs_is_not_cancelled() -> None:
    class _Healthy(_Cluster):
        def count(self) -> int:
            self.submitted.set()
            return 2

    cluster = _Healthy(0.0)
    spark_session._probe_executors(cluster, "spark://127.0.0.1:7077", 0.3)  # type: ignore[arg-type]
    time.sleep(0.5)
    assert not cluster.cancelled.is_set()
