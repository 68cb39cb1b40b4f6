"""What the Spark engine's driver serves as the status page, ``/api/status`` and ``/metrics``.

The endpoints are :mod:`etlstage.observe`'s, unchanged; this module gives them the same
documents the supervisor's live state gives them, built from the driver's
:class:`~etlstage.spark.report.Counts` (Spark's progress events, the sink's batch
counts, the workers' tallies) and Spark's checkpoint (micro-batches committed and in
flight).  A micro-batch is a window: one "source" per E-stage whose windows are the
query's micro-batches.  What only the supervisor knows (its workers' memory and CPU,
queued input, requests in flight) is left out rather than shown as zero.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from etlstage.spark.report import Counts
from etlstage.spark.status import CheckpointStatus, read_checkpoint
from etlstage.state.store import StateStore


def live_state(counts: Counts, checkpoint: CheckpointStatus, started_at: float) -> dict[str, Any]:
    """The document :func:`etlstage.observe.live.live_state` makes for a supervisor."""
    config = counts.config
    root = Path(checkpoint.path)
    now = time.time()
    committed = -1 if checkpoint.committed is None else checkpoint.committed
    opened = max([committed, *checkpoint.in_flight]) + 1
    with counts.lock:
        stages: dict[str, Any] = {}
        for name, s in counts.stats.items():
            stages[name] = {
                "type": s.type,
                "in": s.messages_in,
                "out": s.messages_out,
                "bytes_in": s.bytes_in,
                "bytes_out": s.bytes_out,
                "jobs": s.jobs,
                "in_flight": 0,
                "restarts": s.restarts,
                "deadletters": s.deadletters,
                "failures": dict(s.failures),
                "last_errors": [{"at": at, "error": text} for at, text in s.last_errors],
                "latency": {"buckets": s.latency.cumulative(), "sum": round(s.latency.sum, 6)},
                "workers": [],  # on the executors: their memory and CPU are Spark's to show
                "reports": s.reports(),
                "rate": round(counts.history.rate(name), 1),
                "history": counts.history.series(name),
            }
        elapsed = time.monotonic() - counts.started
    windows = []
    for batch in checkpoint.in_flight:
        opened_at = _mtime(root / "offsets" / str(batch)) or now
        windows.append(
            {
                "source": "micro-batch",
                "seq": batch,
                "closed": True,
                "done": False,
                "messages": None,
                "opened_at": opened_at,
                "request": None,
            }
        )
    return {
        "engine": "spark",
        "pid": os.getpid(),
        "pipeline": config.name,
        "time": now,
        "started_at": started_at,
        "elapsed": round(elapsed, 3),
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
            }
            for e in config.stages
            if e.type == "E"
        ],
        "micro_batches_this_run": counts.batches,
        "checkpoint": checkpoint.path,
    }


def status_document(counts: Counts, started_at: float) -> dict[str, Any]:
    """The document :func:`etlstage.observe.status.status_document` makes, for this run."""
    checkpoint = read_checkpoint(counts.config)
    live = live_state(counts, checkpoint, started_at)
    now = live["time"]
    dead: dict[str, int] = {}
    if (Path(counts.config.state_dir) / StateStore.FILE).exists():
        store = StateStore(counts.config.state_dir)
        try:
            dead = store.deadletter_counts()
        finally:
            store.close()
    return {
        "time": now,
        "engine": "spark",
        "running": [
            {"pid": live["pid"], "started_at": started_at, "heartbeat": now, "state": "running", "progress": live}
        ],
        "dead": [],
        "checkpoints": [
            {
                "source": src["stage"],
                "windows_done": src["windows_committed"],
                "messages": live["stages"][src["stage"]]["out"],  # this run's (Spark keeps no total)
                "committed_end": checkpoint.committed_offsets.get(src["stage"]),
                "updated_at": checkpoint.updated_at or started_at,
            }
            for src in live["sources"]
        ]
        if checkpoint.committed is not None
        else [],
        "windows_in_flight": [
            {
                "source": w["source"],
                "seq": w["seq"],
                "request": None,
                "opened_at": w["opened_at"],
                "age_seconds": round(now - w["opened_at"], 1),
                "messages": None,
                "state": "running",
            }
            for w in live["windows"]
        ],
        "deadletters": {"total": sum(dead.values()), "new": dead.get("new", 0)},
    }


def documents(counts: Counts) -> Callable[[], tuple[dict[str, Any], dict[str, Any]]]:
    """What the HTTP endpoints read, ``(live state, status document)``, from the driver's
    counters; the CLI hands it to :mod:`etlstage.observe.server` (a layer this one does
    not import)."""
    started_at = time.time()

    def take() -> tuple[dict[str, Any], dict[str, Any]]:
        status = status_document(counts, started_at)
        return status["running"][0]["progress"], status

    return take


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


__all__ = ["documents", "live_state", "status_document"]
