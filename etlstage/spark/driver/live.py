"""What the Spark engine's driver serves as the status page, ``/api/status`` and ``/metrics``.

The endpoints are :mod:`etlstage.observe`'s, unchanged; this module gives them the same
documents the supervisor's live state gives them, built from the driver's
:class:`~etlstage.spark.driver.report.Counts` (Spark's progress events, the sink's batch
counts, the workers' tallies) and Spark's checkpoint (micro-batches committed and in
flight).  A micro-batch is a window: one "source" per E-stage whose windows are the
query's micro-batches.  What only the supervisor knows (its workers' memory and CPU,
queued input, requests in flight) is left out rather than shown as zero
(:data:`etlstage.observe.document.ABSENT`).  ``etlstage status --json`` prints the same
document from the checkpoint and the state store, with no run in it.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

from etlstage.config.model import PipelineConfig
from etlstage.kit.stats import stage_document
from etlstage.observe.document import (
    CheckpointDoc,
    DeadLettersDoc,
    LastRunDoc,
    LatencyDoc,
    LiveDoc,
    PhaseDoc,
    PipelineState,
    RunLockDoc,
    StageDoc,
    StatusDoc,
    WindowDoc,
    deadletters,
)
from etlstage.spark.driver.report import Counts
from etlstage.spark.driver.status import CheckpointStatus, read_checkpoint
from etlstage.state.lastrun import last_run
from etlstage.state.runlock import holder
from etlstage.state.store import StateStore


def live_state(counts: Counts, checkpoint: CheckpointStatus) -> LiveDoc:
    """The document :func:`etlstage.observe.live.live_state` makes for a supervisor."""
    config = counts.config
    now = time.time()
    committed = -1 if checkpoint.committed is None else checkpoint.committed
    opened = max([committed, *checkpoint.in_flight]) + 1
    with counts.lock:
        stages: dict[str, StageDoc] = {}
        for name, s in counts.stats.items():
            doc = stages[name] = stage_document(s, counts.history)
            doc["instances"] = [{"instance": i, "restarts": c.restarts} for i, c in sorted(s.instances.items())]
        now_mono = time.monotonic()
        elapsed = now_mono - counts.run_started  # one clock, from the run's start: never goes back
        startup: list[PhaseDoc] = [
            {"name": p.name, "seconds": round(p.seconds(now_mono), 3), "done": p.ended is not None}
            for p in counts.phases
        ]
        batches = counts.commit_latency
        latency: LatencyDoc = {"buckets": batches.cumulative(), "sum": round(batches.sum, 6)}
    windows = _in_flight(checkpoint, now)
    return {
        "engine": "spark",
        "pid": os.getpid(),
        "pipeline": config.name,
        "time": now,
        "started_at": now - elapsed,
        "elapsed": round(elapsed, 3),
        "state": cast(PipelineState, counts.state),
        "stages": stages,
        "windows_in_flight": len(checkpoint.in_flight),
        "windows": windows,
        "sources": [
            {
                "source": e.name,
                "stage": e.name,
                "instance": 0,
                "windows_opened": opened,  # micro-batch ids, counted across runs like window numbers
                "windows_committed": committed + 1,
                "windows_in_flight": len(checkpoint.in_flight),
                "commit_latency": latency,
            }
            for e in config.stages
            if e.type == "E"
        ],
        "micro_batches_this_run": counts.batches,
        "checkpoint": checkpoint.path,
        "startup": startup,
    }


def run_lock(state_dir: str) -> RunLockDoc | None:
    held = holder(state_dir)
    return None if held is None else cast(RunLockDoc, dataclasses.asdict(held))


def status_document(
    config: PipelineConfig, live: LiveDoc | None = None, checkpoint: CheckpointStatus | None = None
) -> StatusDoc:
    """The document :func:`etlstage.observe.status.status_document` makes: from Spark's
    checkpoint and the state store, with ``live`` (the serving driver's) as its one run."""
    checkpoint = checkpoint or read_checkpoint(config, remote=True)
    now = live["time"] if live is not None else time.time()
    committed = 0 if checkpoint.committed is None else checkpoint.committed + 1
    dead: DeadLettersDoc = {"total": 0, "new": 0}
    ended: LastRunDoc | None = None
    if (Path(config.state_dir) / StateStore.FILE).exists():
        store = StateStore(config.state_dir)
        try:
            dead = deadletters(store.deadletter_counts())
            ended = cast(LastRunDoc | None, last_run(store))
        finally:
            store.close()
    checkpoints: list[CheckpointDoc] = [
        {
            "source": e.name,
            "windows_done": committed,
            # this run's (Spark keeps no total across runs); not known outside the run
            "messages": live["stages"][e.name]["out"] if live is not None else None,
            "committed_end": checkpoint.committed_offsets.get(e.name),
            "updated_at": checkpoint.updated_at or (live["started_at"] if live is not None else now),
        }
        for e in config.stages
        if e.type == "E" and checkpoint.committed is not None
    ]
    return {
        "engine": "spark",
        "time": now,
        "running": []
        if live is None
        else [
            {
                "pid": live["pid"],
                "started_at": live["started_at"],
                "heartbeat": now,
                "state": "running",
                "progress": live,
            }
        ],
        "dead": [],
        "last_run": ended,
        "run_lock": run_lock(config.state_dir),
        "checkpoints": checkpoints,
        "windows_in_flight": [
            {
                "source": w["source"],
                "seq": w["seq"],
                "request": None,
                "opened_at": w["opened_at"],
                "age_seconds": round(now - w["opened_at"], 1),
                "messages": None,
                "state": "running" if live is not None else "in flight (replayed with the same offsets)",
            }
            for w in (live["windows"] if live is not None else _in_flight(checkpoint, now))
        ],
        "deadletters": dead,
        "spark_checkpoint": {
            "path": checkpoint.path,
            "last_committed_batch": checkpoint.committed,
            "committed_batches": checkpoint.committed_count,
            "batches_in_flight": checkpoint.in_flight,
            "offsets": checkpoint.offsets,
            "updated_at": checkpoint.updated_at,
            "unread": checkpoint.unread or None,
        },
    }


def documents(counts: Counts) -> Callable[[], tuple[LiveDoc, StatusDoc]]:
    """What the HTTP endpoints read, ``(live state, status document)``, from the driver's
    counters; the CLI hands it to :mod:`etlstage.observe.server` (a layer this one does
    not import)."""

    def take() -> tuple[LiveDoc, StatusDoc]:
        checkpoint = read_checkpoint(counts.config)
        live = live_state(counts, checkpoint)
        return live, status_document(counts.config, live, checkpoint)

    return take


def _in_flight(checkpoint: CheckpointStatus, now: float) -> list[WindowDoc]:
    """The micro-batches planned and not committed, as windows (opened when planned)."""
    root = Path(checkpoint.path)
    return [
        {
            "source": "micro-batch",
            "seq": batch,
            "closed": True,
            "done": False,
            "messages": None,
            "opened_at": _mtime(root / "offsets" / str(batch)) or now,
            "request": None,
        }
        for batch in checkpoint.in_flight
    ]


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


__all__ = ["documents", "live_state", "status_document"]
