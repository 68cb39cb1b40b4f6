"""The status document: what a run shows, typed once, filled by each engine.

Two documents, one inside the other.  :class:`LiveDoc` is a running engine's own view
(stages, windows, sources); the supervisor fills it (:func:`etlstage.observe.live.live_state`,
also written by its heartbeat) and so does the Spark engine's driver
(:func:`etlstage.spark.driver.live.live_state`).  :class:`StatusDoc` joins it with the state
store (checkpoints, windows in flight, dead letters, runs); ``/api/status`` serves it and
``etlstage status --json`` prints it, through :func:`encode`.  The page, ``/metrics`` and
the ``status`` text render it.

A figure an engine cannot know is absent from the document, never 0: a ``NotRequired``
key below, listed per engine in :data:`ABSENT` (docs/operating.md says the same).  The
renderers skip what is absent.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal, NotRequired, TypedDict

Engine = Literal["supervisor", "spark"]


class WorkerDoc(TypedDict):
    """One worker process the engine watches."""

    instance: int
    pid: int | None
    rss: int  # bytes, its process tree
    cpu: float  # percent
    cpu_seconds: float | None


class LatencyDoc(TypedDict):
    buckets: list[tuple[str, int]]  # cumulative: (upper bound in seconds, as Prometheus writes it; requests)
    sum: float


class QueuedDoc(TypedDict):
    messages: int
    bytes: int


# One worker instance of a stage, across its restarts (functional form: "in" is a keyword).
InstanceDoc = TypedDict(
    "InstanceDoc",
    {
        "instance": int,  # under Spark: the partition
        "restarts": int,
        # messages it took in and produced: counted by the supervisor only
        "in": NotRequired[int],
        "out": NotRequired[int],
    },
)


class ErrorDoc(TypedDict):
    at: float
    error: str


# functional form: "in" is a Python keyword
StageDoc = TypedDict(
    "StageDoc",
    {
        "type": str,
        # counted by this run
        "in": int,
        "out": int,
        "bytes_in": int,
        "bytes_out": int,
        "jobs": int,
        "restarts": int,
        "deadletters": int,
        "failures": dict[str, int],  # by reason: exit, timeout, violation
        "last_errors": list[ErrorDoc],
        "latency": LatencyDoc,
        "reports": dict[str, object],  # what the workers reported (SDK ``Worker.report``)
        "rate": float,  # messages/s, last ~10 s
        "history": list[tuple[float, float]],  # (seconds ago, messages/s)
        "instances": list[InstanceDoc],  # supervisor: every instance; Spark: each partition with a tally
        # known to the supervisor only: its own workers and queues
        "in_flight": NotRequired[int],
        "queued": NotRequired[QueuedDoc],
        "rss": NotRequired[int],
        "cpu": NotRequired[float],
        "workers": NotRequired[list[WorkerDoc]],
        # messages sent to the stage again after a worker failure (neighbours of a failed
        # message included); the Spark engine's task retries do not count them
        "resent": NotRequired[int],
    },
)


class WindowDoc(TypedDict):
    """A window opened and not yet committed (under Spark: a micro-batch in flight)."""

    source: str
    seq: int
    closed: bool
    done: bool
    messages: int | None  # None: not known (Spark)
    opened_at: float
    request: str | None


class SourceDoc(TypedDict):
    """One E-stage instance's windows, numbered across runs."""

    source: str
    stage: str
    instance: int
    windows_opened: int
    windows_committed: int
    windows_in_flight: int
    # window opened (under Spark: micro-batch started) to committed, seconds; one per window
    commit_latency: LatencyDoc


# running; draining: stopping gracefully (no new requests, what is in flight finishes);
# failed: a stage failed and the run is ending with an error
PipelineState = Literal["running", "draining", "failed"]
PIPELINE_STATES: tuple[PipelineState, ...] = ("running", "draining", "failed")


class LiveDoc(TypedDict):
    engine: Engine
    pid: int
    pipeline: str
    time: float
    started_at: float
    elapsed: float
    state: PipelineState
    stages: dict[str, StageDoc]
    windows_in_flight: int
    windows: list[WindowDoc]
    sources: list[SourceDoc]
    # the Spark engine's own
    micro_batches_this_run: NotRequired[int]
    checkpoint: NotRequired[str]
    startup: NotRequired[list[PhaseDoc]]  # in order; elapsed counts them (the run's start, not the query's)


class PhaseDoc(TypedDict):
    """One phase of a run's start-up (the Spark engine's: JVM start, session, pre-flight job,
    data sources, query start, first micro-batch)."""

    name: str
    seconds: float  # so far, while it runs
    done: bool


class RunDoc(TypedDict):
    pid: int
    started_at: float
    heartbeat: float
    state: str  # running, not responding
    progress: LiveDoc | None


class DeadRunDoc(TypedDict):
    pid: int
    started_at: float
    heartbeat: float


class CheckpointDoc(TypedDict):
    source: str
    windows_done: int
    messages: int | None  # None: not known (Spark keeps no total across runs)
    committed_end: object
    updated_at: float


class WindowInFlightDoc(TypedDict):
    source: str
    seq: int
    request: object
    opened_at: float
    age_seconds: float
    messages: int | None
    state: str


class DeadLettersDoc(TypedDict):
    total: int
    new: int


class SparkCheckpointDoc(TypedDict):
    """Spark's checkpoint as it is on disk (micro-batch numbers, offsets)."""

    path: str
    last_committed_batch: int | None
    committed_batches: int
    batches_in_flight: list[int]
    offsets: dict[str, object]
    updated_at: float | None
    unread: str | None  # why the checkpoint was not read (a file system status cannot read, no access); None: read


class LastRunDoc(TypedDict):
    """How the newest finished run ended (``etlstage.state.lastrun``)."""

    pid: int
    engine: str
    started_at: float
    ended_at: float
    seconds: float
    exit_status: int
    outcome: str
    error: str | None


class RunLockDoc(TypedDict):
    """Who holds the pipeline's state (``etlstage.state.runlock``): one run at a time."""

    pid: int
    host: str
    engine: str
    started_at: float
    file: str
    last_engine: str
    last_file: str


class StatusDoc(TypedDict):
    engine: Engine
    time: float
    running: list[RunDoc]
    dead: list[DeadRunDoc]
    checkpoints: list[CheckpointDoc]
    windows_in_flight: list[WindowInFlightDoc]
    deadletters: DeadLettersDoc
    last_run: LastRunDoc | None  # None until a run has ended
    run_lock: RunLockDoc | None  # None: no run holds the state
    spark_checkpoint: NotRequired[SparkCheckpointDoc]


# What each engine leaves out, as dotted paths (the records of a list or of ``stages``
# share one); everything else declared above both engines fill, and a test holds them to it.
ABSENT: dict[Engine, frozenset[str]] = {
    "supervisor": frozenset(
        {
            "spark_checkpoint",
            "running.progress.micro_batches_this_run",
            "running.progress.checkpoint",
            "running.progress.startup",
        }
    ),
    "spark": frozenset(
        {
            "running.progress.stages.in_flight",
            "running.progress.stages.queued",
            "running.progress.stages.rss",
            "running.progress.stages.cpu",
            "running.progress.stages.workers",
            "running.progress.stages.resent",
            "running.progress.stages.instances.in",
            "running.progress.stages.instances.out",
        }
    ),
}


def deadletters(by_status: dict[str, int]) -> DeadLettersDoc:
    """The dead-letter figures from the state store's counts by status.

    >>> deadletters({"new": 2, "replayed": 3})
    {'total': 5, 'new': 2}
    """
    return {"total": sum(by_status.values()), "new": by_status.get("new", 0)}


def encode(doc: StatusDoc | LiveDoc, indent: int | None = None) -> str:
    """The one JSON encoding of a document, for ``/api/status`` and ``etlstage status --json``."""
    separators = (",", ":") if indent is None else (",", ": ")
    return json.dumps(_finite(doc), indent=indent, separators=separators, default=str, allow_nan=False)


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity as ``null``: JSON has no word for them, and a
    reader's strict parser would refuse the whole document for one."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


__all__ = [
    "ABSENT",
    "PIPELINE_STATES",
    "CheckpointDoc",
    "DeadLettersDoc",
    "DeadRunDoc",
    "InstanceDoc",
    "LastRunDoc",
    "LiveDoc",
    "PhaseDoc",
    "PipelineState",
    "RunDoc",
    "RunLockDoc",
    "SourceDoc",
    "StageDoc",
    "StatusDoc",
    "WindowDoc",
    "WindowInFlightDoc",
    "WorkerDoc",
    "deadletters",
    "encode",
]
