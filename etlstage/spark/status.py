"""``etlstage status`` for the Spark engine: what Spark's checkpoint says.

The checkpoint's ``offsets/N`` is written before micro-batch N runs and ``commits/N``
after every task of its sink acknowledged it, so a batch with offsets and no commit is
in flight (after a crash: the batch that is replayed, with the same offsets).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from etlstage.config.model import PipelineConfig
from etlstage.spark.checkpoint import check_checkpoint, is_local


@dataclass
class CheckpointStatus:
    path: str
    committed: int | None = None  # the last committed micro-batch
    committed_count: int = 0
    in_flight: list[int] = field(default_factory=list)
    offsets: dict[str, object] = field(default_factory=dict)  # E-stage -> offset of the last planned batch
    committed_offsets: dict[str, object] = field(default_factory=dict)  # ... of the last committed batch
    updated_at: float | None = None


def _batches(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.glob("[0-9]*") if p.name.isdigit()) if folder.is_dir() else []


def read_checkpoint(config: PipelineConfig) -> CheckpointStatus:
    if not is_local(config.engine.checkpoint):  # Spark's logs on a Hadoop URI: not read from here
        return CheckpointStatus(config.engine.checkpoint)
    root = Path(config.engine.checkpoint)
    check_checkpoint(root)  # damaged: named, with what to do (exit 2), as `run` does
    status = CheckpointStatus(str(root))
    offsets, commits = _batches(root / "offsets"), _batches(root / "commits")
    if commits:
        status.committed = commits[-1]
        status.committed_count = len(commits)
        status.updated_at = (root / "commits" / str(commits[-1])).stat().st_mtime
    status.in_flight = [b for b in offsets if status.committed is None or b > status.committed]
    if offsets:
        status.offsets = _offsets(root / "offsets" / str(offsets[-1]), config)
    if status.committed is not None and status.committed in offsets:
        status.committed_offsets = _offsets(root / "offsets" / str(status.committed), config)
    return status


def _offsets(path: Path, config: PipelineConfig) -> dict[str, object]:
    """E-stage -> its offset in one ``offsets/N`` file of the checkpoint."""
    found: dict[str, object] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError:  # Spark removed it meanwhile (it keeps the last hundred or so)
        return found
    sources = [s.name for s in config.stages if s.type == "E"]  # the query's sources, in this order
    for name, line in zip(sources, lines[2:], strict=False):
        try:
            found[name] = json.loads(line)
        except ValueError:
            found[name] = line
    return found


__all__ = ["CheckpointStatus", "read_checkpoint"]
