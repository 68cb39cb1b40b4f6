"""What each worker of a run did on the executors: starts, restarts by reason, requests, last errors.

A worker lives in one of Spark's Python processes, usually on another host than the
driver, and its restarts happen inside tasks — some of which fail and are retried, so
they never return a commit message.  Each Python process therefore sends one small JSON
document per (stage, partition) it runs a worker for to the driver line
(:mod:`etlstage.spark.driver_line`): after every task, and at once when its worker fails.  The
driver keeps the latest of each as a file in its engine folder and sums its run's files
for the progress display, the summary and ``/metrics``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from etlstage.config.model import PipelineConfig
from etlstage.kit.stats import StageStats
from etlstage.spark.checkpoint import own_path, owner_only, private_folder


@dataclass
class Tally:
    """One worker slot (stage, partition) in one Python process; its processes come and go.

    ``stats`` counts as the supervisor counts a stage (:class:`StageStats`: requests and
    their latency, restarts, failures by reason, last errors, worker pids)."""

    stage: str
    partition: int
    starts: int = 0
    stats: StageStats = field(default_factory=lambda: StageStats("", ""))

    def to_json(self) -> str:
        st = self.stats
        return json.dumps(
            {
                "stage": self.stage,
                "partition": self.partition,
                "starts": self.starts,
                "jobs": st.jobs,
                "restarts": st.restarts,
                "failures": st.failures,
                "last_errors": list(st.last_errors),
                "pids": st.pids,
                "latency": {"counts": st.latency.counts, "sum": st.latency.sum},
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Tally:
        doc: dict[str, Any] = json.loads(text)
        st = StageStats(str(doc["stage"]), "")
        st.jobs, st.restarts = int(doc["jobs"]), int(doc["restarts"])
        st.failures = {str(k): int(v) for k, v in doc["failures"].items()}
        st.last_errors.extend((float(at), str(text)) for at, text in doc["last_errors"])
        st.pids = [int(p) for p in doc["pids"]]
        counts = doc["latency"]["counts"]
        if len(counts) == len(st.latency.counts):
            st.latency.counts = [int(n) for n in counts]
            st.latency.sum = float(doc["latency"]["sum"])
        return cls(st.name, int(doc["partition"]), int(doc["starts"]), st)


def tally_dir(config: PipelineConfig, run_id: str) -> Path:
    """A run's tallies, in the driver's folder for the engine's own files."""
    return own_path(config, "workers", run_id)


def owner_name(tally: Tally) -> str:
    """The file name of this Python process's tally for its (stage, partition)."""
    return f"{tally.stage}-{tally.partition}-{socket.gethostname()}-{os.getpid()}.json"


def write(folder: Path, tally: Tally, name: str | None = None) -> None:
    """Replace the file ``name`` (this process's) for the tally's (stage, partition); never fails."""
    name = name or owner_name(tally)
    if "/" in name or not name.endswith(".json") or name.startswith("."):
        return
    with contextlib.suppress(OSError):
        private_folder(folder)
        tmp = folder / f".{name}.tmp"
        with open(tmp, "w", opener=owner_only) as f:
            f.write(tally.to_json())
        os.replace(tmp, folder / name)


def read_all(folder: Path) -> list[Tally]:
    found = []
    for path in folder.glob("*.json") if folder.is_dir() else ():
        try:
            found.append(Tally.from_json(path.read_text()))
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            continue  # being replaced, or not ours
    return found


def forget_other_runs(config: PipelineConfig, run_id: str) -> None:
    """Earlier runs' files (a driver that died left them); the summary counts this run's only."""
    parent = tally_dir(config, run_id).parent
    for old in parent.iterdir() if parent.is_dir() else ():
        if old.name != run_id:
            shutil.rmtree(old, ignore_errors=True)


__all__ = ["Tally", "forget_other_runs", "owner_name", "read_all", "tally_dir", "write"]
