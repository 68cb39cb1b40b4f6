"""The Kinesis Spark source's offsets and its log of reached positions.

An offset (JSON in Spark's offset log) names the micro-batch that reads *from* it::

    {"batch": 7,
     "shards": {"shardId-000000000001": {"parents": [], "start": "TRIM_HORIZON", "ts": null,
                                         "seq": "4962...", "sub": 0, "complete": true}},
     "ended": ["shardId-000000000000"],
     "read": {"shardId-000000000001": 500}}

``shards``: every known shard not yet finished, with where batch 7 starts it (``seq``/``sub``:
the last user record read before; ``complete`` false when that record is a KPL aggregate
read only up to sub-record ``sub``).  ``ended``: shards that reached SHARD_END (their
children may be read).  ``read``: the shards batch 7 reads, each with its record limit
(``null``: no limit).

Where a batch's reading really stopped is not in the offset (GetRecords decides that):
each task writes it to the :class:`ReachedLog` under the stage's checkpoint directory
before its rows are handed on, and the next offset starts from it.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from etlstage_workers.kinesis.output import Position
from etlstage_workers.kinesis.store import ShardRow, position_key

from etlstage.errors import PipelineError
from etlstage.native import Keep
from etlstage.worker.durable import fsync_path


def initial_offset() -> dict[str, Any]:
    return {"batch": 0, "shards": {}, "ended": [], "read": {}}


def encode(batch: int, rows: dict[str, ShardRow], read: dict[str, int | None]) -> dict[str, Any]:
    shards = {
        sid: {
            "parents": r.parents,
            "start": r.start_type,
            "ts": r.start_ts,
            "seq": r.seq,
            "sub": r.subseq,
            "complete": r.complete,
        }
        for sid, r in sorted(rows.items())
        if not r.ended
    }
    ended = sorted(sid for sid, r in rows.items() if r.ended)
    return {"batch": batch, "shards": shards, "ended": ended, "read": dict(sorted(read.items()))}


def decode(offset: dict[str, Any]) -> dict[str, ShardRow]:
    """The shard rows an offset holds (finished ones with ``ended`` set)."""
    rows = {
        sid: ShardRow(sid, list(s["parents"]), s["start"], s["ts"], s["seq"], s["sub"], bool(s["complete"]), False)
        for sid, s in offset.get("shards", {}).items()
    }
    for sid in offset.get("ended", []):
        rows[sid] = ShardRow(sid, [], "SKIP", None, None, None, True, True)
    return rows


def after(offset: dict[str, Any], reached: dict[str, Reached]) -> dict[str, ShardRow]:
    """The shards as the batch that reads from ``offset`` left them, given where its reads stopped."""
    rows = decode(offset)
    for sid, r in reached.items():
        row = rows[sid]
        if r.seq is not None:
            row.seq, row.subseq, row.complete = r.seq, r.sub, r.complete
        row.ended = row.ended or r.ended
    return rows


def position_of(row: ShardRow) -> Position | None:
    return Position(row.seq, row.subseq or 0, row.complete) if row.seq is not None else None


@dataclass(frozen=True)
class Reached:
    """Where one task's reading of one shard stopped."""

    seq: str | None
    sub: int | None
    complete: bool
    ended: bool  # SHARD_END reached: the shard is finished
    more: bool  # stopped by the record limit, not because it was caught up
    records: int
    lag_ms: int | None = None  # the last MillisBehindLatest the read saw (files before it have none)

    @property
    def key(self) -> tuple[int, int]:
        return position_key(self.seq, self.sub)

    def same_end(self, other: Reached) -> bool:
        return (self.key, self.complete, self.ended) == (other.key, other.complete, other.ended)


class ReachedLog:
    """``<checkpoint>/kinesis-reached/<batch>/<shard>.json``: one file per (batch, shard), written once.

    ``checkpoint`` is the stage's folder on the driver. Tasks, which need not see it, pass
    ``keep`` (the context's :class:`~etlstage.native.Keep`): their reads and writes
    then go through the driver line, with the same write-once rule.
    """

    def __init__(self, checkpoint: str, keep: Keep | None = None) -> None:
        self.root = Path(checkpoint) / "kinesis-reached"
        self.keep = keep

    def _name(self, batch: int, shard_id: str) -> str:
        return f"kinesis-reached/{batch}/{shard_id.replace('/', '_')}.json"

    def _path(self, batch: int, shard_id: str) -> Path:
        return self.root / str(batch) / f"{shard_id.replace('/', '_')}.json"

    def load(self, batch: int, shard_id: str) -> Reached | None:
        path = self._path(batch, shard_id)
        try:
            if self.keep is not None:
                held = self.keep(self._name(batch, shard_id), None)
                if held is None:
                    return None
                doc = json.loads(held)
            else:
                doc = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise PipelineError(f"{path}: damaged ({exc}); the batch cannot be replayed exactly") from None
        return Reached(**doc)

    def record(self, batch: int, shard_id: str, reached: Reached) -> Reached:
        """Write ``reached`` durably unless a file is there already; return what the file holds."""
        if self.keep is not None:
            held = self.keep(self._name(batch, shard_id), json.dumps(asdict(reached), separators=(",", ":")).encode())
            assert held is not None
            return Reached(**json.loads(held))
        path = self._path(batch, shard_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{id(reached)}.tmp")
        with open(tmp, "w") as f:
            json.dump(asdict(reached), f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # atomic, and never over a file another attempt wrote first
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
        fsync_path(path.parent, directory=True)
        found = self.load(batch, shard_id)
        assert found is not None
        return found

    def forget_before(self, batch: int) -> None:
        """Batches before ``batch`` are committed and will never be replayed."""
        if not self.root.exists():
            return
        for d in self.root.iterdir():
            if d.name.isdigit() and int(d.name) < batch:
                shutil.rmtree(d, ignore_errors=True)
