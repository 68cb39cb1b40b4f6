"""Which shards an instance reads, where each starts, and when a child may begin.

- Ownership: the number in ``shardId-000000000007`` mod instances (other ids: their
  crc32) — stable across restarts, independent of the listing order, and an even spread
  of a stream's first shards (crc32 alone put shards 0-3 all on instance 0 of 2).
  A child shard may belong to another instance than its parents; it waits until the
  store says every parent reached SHARD_END.
- Start of a shard with no checkpoint, decided once when it is first seen and kept in
  the store: on the very first listing of a stream every shard takes the initial
  position (``LATEST``: closed shards are skipped, open ones start at the tip);
  shards that appear later and descend from a known shard start at TRIM_HORIZON, so
  nothing written after a split or merge is missed.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from etlstage_workers.kinesis.store import ShardRow

if TYPE_CHECKING:
    from etlstage_workers.kinesis.client import KinesisApi

INITIAL_POSITIONS = ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")
_SHARD_NUMBER = re.compile(r"shardId-(\d+)")


def _never(shard_id: str) -> bool:
    return False


def owner(shard_id: str, instances: int) -> int:
    """The instance that reads ``shard_id``.

    >>> [owner(f"shardId-{i:012d}", 2) for i in range(4)]
    [0, 1, 0, 1]
    """
    if instances <= 1:
        return 0
    number = _SHARD_NUMBER.fullmatch(shard_id)
    if number:
        return int(number.group(1)) % instances
    return zlib.crc32(shard_id.encode("utf-8")) % instances


def parents_of(shard: dict[str, Any]) -> list[str]:
    return [p for p in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")) if p]


def is_closed(shard: dict[str, Any]) -> bool:
    return "EndingSequenceNumber" in shard.get("SequenceNumberRange", {})


def unfinished_parents(
    row: ShardRow, rows: dict[str, ShardRow], also_ended: Callable[[str], bool] = _never
) -> list[str]:
    """The parents of ``row`` still to reach SHARD_END: a child is read only when this is empty.

    A parent the stream no longer lists (not in ``rows``) is not waited for.
    """
    return [p for p in row.parents if p in rows and not rows[p].ended and not also_ended(p)]


def iterator_from(
    api: KinesisApi,
    row: ShardRow,
    seq: str | None,
    subseq: int | None,
    complete: bool,
    latest_now: bool = False,
) -> tuple[str, tuple[int, int] | None]:
    """A fresh iterator just after the position ``seq``/``subseq`` (else at the row's start).

    Returns the iterator and, when resuming inside an aggregated record, the
    ``(sequence, sub-sequence)`` whose user records were already read: the caller skips
    those.  ``latest_now``: the first iterator of a ``LATEST`` shard really is ``LATEST``;
    later ones resume ``AT_TIMESTAMP`` from the time pinned in ``row.start_ts``.
    """
    sid = row.shard_id
    if seq is not None:
        if complete:
            return api.shard_iterator(sid, "AFTER_SEQUENCE_NUMBER", seq=seq), None
        # resume inside an aggregated record: read it again, skip the sub-records done
        it = api.shard_iterator(sid, "AT_SEQUENCE_NUMBER", seq=seq)
        return it, (int(seq), subseq if subseq is not None else -1)
    if row.start_type == "TRIM_HORIZON":
        return api.shard_iterator(sid, "TRIM_HORIZON"), None
    if row.start_type == "LATEST" and latest_now:
        return api.shard_iterator(sid, "LATEST"), None
    if row.start_type in ("AT_TIMESTAMP", "LATEST") and row.start_ts is not None:
        return api.shard_iterator(sid, "AT_TIMESTAMP", ts=row.start_ts), None
    raise AssertionError(f"{sid}: start type {row.start_type!r} is never read")


def lineage_order(shards: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Parents before children (then by shard id), whatever order the listing had."""
    by_id = {s["ShardId"]: s for s in shards}
    done: set[str] = set()
    out: list[dict[str, Any]] = []

    def visit(sid: str, trail: tuple[str, ...]) -> None:
        if sid in done or sid not in by_id or sid in trail:
            return
        for p in parents_of(by_id[sid]):
            visit(p, (*trail, sid))
        done.add(sid)
        out.append(by_id[sid])

    for sid in sorted(by_id):
        visit(sid, ())
    return out


def plan_new(
    listed: list[dict[str, Any]], known: dict[str, ShardRow], initial: str, timestamp: float | None
) -> list[ShardRow]:
    """Rows for the shards in ``listed`` that ``known`` (the store) has not seen yet."""
    first_listing = not known
    seen = set(known)
    rows: list[ShardRow] = []
    for shard in lineage_order(listed):
        sid = shard["ShardId"]
        if sid in seen:
            continue
        parents = parents_of(shard)
        start_type, start_ts, ended = initial, timestamp, False
        if not first_listing and any(p in seen for p in parents):
            start_type, start_ts = "TRIM_HORIZON", None
        elif initial == "LATEST":
            start_ts = None
            if is_closed(shard):
                start_type, ended = "SKIP", True  # all of it lies before "now"
        rows.append(ShardRow(sid, parents, start_type, start_ts, None, None, True, ended))
        seen.add(sid)
    return rows
