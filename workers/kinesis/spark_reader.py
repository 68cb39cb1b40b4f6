"""The ``etlstage-kinesis`` data source: planning on the driver, one task per shard.

The scheme (offsets, reached positions, exact replay) is described in :mod:`.spark_source`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pyarrow as pa
from etlstage_workers.kinesis.client import KinesisApi, make_client, stream_key
from etlstage_workers.kinesis.output import Framer, Position
from etlstage_workers.kinesis.readahead import shares
from etlstage_workers.kinesis.retry import Backoff, RateLimit, error_code
from etlstage_workers.kinesis.shards import iterator_from, plan_new, unfinished_parents
from etlstage_workers.kinesis.spark_offsets import (
    Reached,
    ReachedLog,
    after,
    decode,
    encode,
    initial_offset,
    position_of,
)
from etlstage_workers.kinesis.spark_source import SOURCE_NAME, Settings
from etlstage_workers.kinesis.store import CheckpointStore, Commit, ShardRow, position_key
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from etlstage.errors import PipelineError
from etlstage.sparkapi import KeepOnce
from etlstage.worker.runner import write_report_file

log = logging.getLogger("etlstage.kinesis.spark")

PROBE_THREADS = 8  # shards the driver asks at once whether records wait


class KinesisSource(DataSource):
    """``spark.readStream.format("etlstage-kinesis").options(**Settings.to_options())``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return "value binary"

    def streamReader(self, schema: object) -> DataSourceStreamReader:
        return KinesisReader(Settings.from_options(self.options))


class ShardPartition(InputPartition):
    """Batch ``batch`` reads ``row`` (from its position) with at most ``limit`` records."""

    def __init__(self, batch: int, row: ShardRow, limit: int | None) -> None:
        super().__init__(row.shard_id)
        self.batch = batch
        self.row = row
        self.limit = limit


class KinesisReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self.o = settings.options
        self.reached = ReachedLog(settings.checkpoint)  # the driver's planning: its own folder
        # the tasks': through the driver line (they need not see the driver's folders)
        self.task_reached = ReachedLog(settings.checkpoint, KeepOnce.from_option(settings.keep))
        self.available_now = settings.once
        self._api: KinesisApi | None = None
        # the driver's view of the shards at the start offset it was last asked about
        self._view_batch: int | None = None
        self._rows: dict[str, ShardRow] = {}
        self._more: set[str] = set()  # shards whose last read was cut short by the record limit
        self._answer: tuple[int, dict[str, Any]] | None = None
        self._registry_at_start: dict[str, Any] = {}
        self._last_sync = 0.0
        self._sync_needed = True
        self._next_probe: dict[str, float] = {}
        self._probe_iterators: dict[str, tuple[tuple[Any, ...], str]] = {}
        self._rates: dict[str, RateLimit] = {}
        self.lag = LagReport(settings)

    # --- both sides ---------------------------------------------------------------------

    def api(self) -> KinesisApi:
        if self._api is None:
            o = self.o
            client = make_client(o.stream, o.region, o.endpoint_url, o.profile)
            self._api = KinesisApi(client, o.stream, Backoff(o.backoff_base_ms, o.max_retries))
        return self._api

    def _rate(self, shard_id: str) -> RateLimit:
        if shard_id not in self._rates:
            self._rates[shard_id] = RateLimit(self.o.max_gets_per_second)
        return self._rates[shard_id]

    # --- driver: offsets ----------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """Where the stage's committed positions are (the worker's, if it ran last on the supervisor)."""
        store = self._store()
        try:
            rows = store.rows()
        finally:
            store.close()
        return encode(0, rows, {}) if rows else initial_offset()

    def _store(self) -> CheckpointStore:
        """The positions the ``etlstage-kinesis`` worker keeps: one state for both engines."""
        return CheckpointStore(self.o.state_dir or self.s.report_dir or None, stream_key(self.o.stream))

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.o.max_records_per_cycle)

    def prepareForTriggerAvailableNow(self) -> None:
        """Available-now: every planning round asks every caught-up shard (no idle pause)."""
        self.available_now = True

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        batch = int(start["batch"])
        if self._answer is not None and self._answer[0] == batch:
            return self._answer[1]  # asked again for the same batch: the same answer
        if self._view_batch != batch:
            self._advance(start)
        most = limit.max_rows if isinstance(limit, ReadMaxRows) else None  # records in the batch, all shards
        read: dict[str, int | None] = {}
        while True:
            if self._sync_needed or time.monotonic() - self._last_sync >= self.o.shard_sync_interval:
                self._sync()
            newly_ended = False
            to_ask = []
            for row in self._readable():
                if row.shard_id in read:
                    continue
                if row.shard_id in self._more:
                    read[row.shard_id] = most
                else:
                    to_ask.append(row)
            for row, (waiting, ended) in zip(to_ask, self._probe_all(to_ask), strict=True):
                if waiting:
                    read[row.shard_id] = most
                elif ended:
                    log.info("%s: end of shard reached", row.shard_id)
                    row.ended = newly_ended = self._sync_needed = True
            if not newly_ended:  # else its children may be readable now
                break
        if most is not None and read:  # a micro-batch holds what the worker's cycle holds: the limit in all, shared
            for sid, share in zip(read, shares(most, len(read), most), strict=True):
                read[sid] = max(1, share)  # more shards than the limit: one each, none left behind
        self.lag.publish({sid for sid, row in self._rows.items() if row.ended})
        end = encode(batch + 1, self._rows, read)
        if not read and _registry(end) == self._registry_at_start:
            return start
        # a batch, or new shards / finished shards to keep: an offset with nothing to read
        # (a pinned LATEST start time survives a restart only in the offset log)
        self._answer = (batch, end)
        self.lag.planned.add(batch + 1)
        return end

    def _reached(self, offset: dict[str, Any]) -> dict[str, Reached]:
        """Where the tasks of the batch that reads from ``offset`` stopped, shard by shard."""
        batch = int(offset["batch"])
        found = {}
        for sid in offset.get("read", {}):
            reached = self.reached.load(batch, sid)
            if reached is None:
                raise PipelineError(
                    f"stage {self.s.stage!r}: batch {batch} read {sid} but {self.reached.root} holds no "
                    "position for it: the checkpoint directory must be one the executors and the driver share"
                )
            found[sid] = reached
        return found

    def _advance(self, start: dict[str, Any]) -> None:
        """The shards as batch ``start["batch"]`` left them: its offset plus the positions its tasks reached."""
        batch = int(start["batch"])
        reached = self._reached(start)
        rows = after(start, reached)
        # planned from ``start`` only once the batch that ended there committed (Spark delivers
        # commit() lazily, never for a run's last batch): its positions are the stage's now
        self._write_positions(rows)
        more = {sid for sid, r in reached.items() if r.more and not r.ended}
        for sid, r in reached.items():
            self.lag.read(batch, sid, r)
        self._rows, self._more, self._view_batch = rows, more, batch
        self._registry_at_start = _registry(encode(batch, rows, {}))
        self._sync_needed = True

    def _sync(self) -> None:
        listed = self.api().list_shards()
        listed_ids = {s["ShardId"] for s in listed}
        new = plan_new(listed, self._rows, self.o.initial_position, self.o.timestamp)
        now = time.time()
        for row in new:
            if row.start_type == "LATEST" and row.start_ts is None:
                row.start_ts = now  # pinned: the offset log keeps it, a replay starts at the same time
            self._rows[row.shard_id] = row
        if new:
            log.info("new shards: %s", ", ".join(f"{r.shard_id} ({r.start_type})" for r in new))
        for sid in [sid for sid in self._rows if sid not in listed_ids]:
            row = self._rows[sid]
            if not row.ended:
                log.warning(
                    "%s no longer exists (past the stream's retention period?): marked ended; records it held "
                    "that were not read before cannot be read any more",
                    sid,
                )
            del self._rows[sid]  # a parent not listed is not waited for
        self._last_sync = time.monotonic()
        self._sync_needed = False

    def _readable(self) -> list[ShardRow]:
        rows = self._rows
        return [r for sid, r in sorted(rows.items()) if not r.ended and not unfinished_parents(r, rows)]

    def _probe_all(self, rows: list[ShardRow]) -> list[tuple[bool, bool]]:
        """:meth:`_probe` for each row, a few at once (boto3 clients are thread-safe)."""
        if len(rows) <= 1:
            return [self._probe(row) for row in rows]
        self.api()
        for row in rows:
            self._rate(row.shard_id)
        with ThreadPoolExecutor(min(PROBE_THREADS, len(rows)), thread_name_prefix="kinesis-probe") as pool:
            return list(pool.map(self._probe, rows))

    def _probe(self, row: ShardRow) -> tuple[bool, bool]:
        """(records wait after the row's position, the shard ended there): one GetRecords(Limit=1).

        An empty answer's next iterator stands at the same position: the next look at the
        shard reuses it (one call instead of two) until the position moves.
        """
        sid = row.shard_id
        now = time.monotonic()
        if not self.available_now and now < self._next_probe.get(sid, 0.0):
            return False, False
        self._next_probe[sid] = now + self.o.idle_sleep
        api = self.api()
        at = (row.seq, row.subseq, row.complete, row.start_type, row.start_ts)
        kept = self._probe_iterators.pop(sid, None)
        reply = None
        if kept is not None and kept[0] == at:
            try:
                reply = api.get_records(kept[1], 1, sid, self._rate(sid))
            except Exception as exc:
                if error_code(exc) != "ExpiredIteratorException":
                    raise
        if reply is None:
            it, _ = iterator_from(api, row, row.seq, row.subseq, row.complete)
            reply = api.get_records(it, 1, sid, self._rate(sid))
        self.lag.saw(sid, reply.get("MillisBehindLatest"))
        if reply.get("Records") or reply.get("MillisBehindLatest"):
            return True, False
        following = reply.get("NextShardIterator")
        if following is not None:
            self._probe_iterators[sid] = (at, following)
        return False, following is None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        batch = int(end["batch"])
        if batch == int(start["batch"]):
            return []
        rows = decode(end)
        return [ShardPartition(batch, rows[sid], limit) for sid, limit in end["read"].items()]

    def commit(self, end: dict[str, Any]) -> None:
        """Batch ``end["batch"]`` committed: where it stopped becomes the stage's committed positions (the
        worker's store, read by either engine's next run); positions of earlier batches are no longer needed."""
        self._write_positions(after(end, self._reached(end)))
        self.reached.forget_before(int(end["batch"]))

    def _write_positions(self, rows: dict[str, ShardRow]) -> None:
        """Committed positions into the worker's store (never backwards: a second time changes nothing)."""
        store = self._store()
        try:
            store.register(list(rows.values()))
            store.commit(Commit(sid, r.seq, r.subseq, r.complete, r.ended) for sid, r in rows.items())
        finally:
            store.close()

    # --- tasks --------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ShardPartition)
        sid, batch = partition.row.shard_id, partition.batch
        target = self.task_reached.load(batch, sid)
        reached = yield from self._read_shard(partition, target)
        if target is None:
            found = self.task_reached.record(batch, sid, reached)
            if not found.same_end(reached):
                raise PipelineError(
                    f"stage {self.s.stage!r}: another attempt of batch {batch}, {sid} recorded a different end"
                )
        elif not target.same_end(replace(reached, ended=target.ended)):
            raise PipelineError(
                f"stage {self.s.stage!r}: batch {batch} is replayed but {sid} no longer reaches the position "
                f"{target.seq}/{target.sub} read the first time (records past retention?); "
                "the replay cannot give the same rows"
            )

    def _read_shard(self, part: ShardPartition, target: Reached | None) -> Generator[pa.RecordBatch, None, Reached]:
        """Messages of one shard from its position: up to ``target`` when replaying, else the limit."""
        row = part.row
        sid = row.shard_id
        framer = Framer(
            self.s.markers,
            envelope=self.o.envelope,
            data_encoding=self.o.data_encoding,
            on_marker=self.o.on_marker,
            deaggregate_kpl=self.o.deaggregate,
        )
        pos = position_of(row)
        taken = 0
        ended = caught_up = False
        lag: int | None = None
        stop = target.key if target is not None else None
        room = part.limit if target is None else None
        iterator: str | None = None
        after: tuple[int, int] | None = None
        while True:
            if stop is not None and _key(pos) >= stop:
                break
            if room is not None and taken >= room:
                break
            if iterator is None:
                iterator, after = self._iterator(row, pos)
            ask = self.o.limit if room is None else min(self.o.limit, room - taken)
            try:
                reply = self.api().get_records(iterator, ask, sid, self._rate(sid))
            except Exception as exc:
                if error_code(exc) != "ExpiredIteratorException":
                    raise
                log.info("%s: iterator expired; a fresh one from the last position", sid)
                iterator = None
                continue
            records = reply.get("Records") or []
            left = None if room is None else room - taken
            messages, last, cut = take(framer, sid, records, after, left, stop)
            after = None
            if last is not None:
                pos = last
            taken += len(messages)
            if messages:
                yield pa.RecordBatch.from_arrays([pa.array(messages, pa.binary())], ["value"])
            if cut:
                break
            iterator = reply.get("NextShardIterator")
            if iterator is None:
                ended = True
                break
            lag = reply.get("MillisBehindLatest")
            if len(records) < ask and not lag:
                caught_up = True
                break
            if room is not None and taken >= room and lag == 0:
                caught_up = True  # the limit ended at the tip: the next batch need not read it unasked
        seq, sub, complete = (pos.seq, pos.subseq, pos.complete) if pos else (None, None, True)
        more = not ended and not caught_up
        return Reached(seq, sub, complete, ended, more, taken, lag)

    def _iterator(self, row: ShardRow, pos: Position | None) -> tuple[str, tuple[int, int] | None]:
        if pos is None:
            return iterator_from(self.api(), row, None, None, True)
        return iterator_from(self.api(), row, pos.seq, pos.subseq, pos.complete)


class LagReport:
    """Each shard's MillisBehindLatest as the driver last learnt it (from the tasks' reached
    positions and its own probes), with the records the run read: logged every
    ``--lag-log-interval`` seconds as the extractor logs it, and written as the stage's
    report (``lag ms``, ``records``) that the progress display, the status page and
    ``/metrics`` show, as for the worker."""

    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self.lags: dict[str, int] = {}
        self.records = 0
        self.planned: set[int] = set()  # batches this run planned: their records are its own
        self._logged = time.monotonic()

    def read(self, batch: int, shard_id: str, reached: Reached) -> None:
        if batch in self.planned:
            self.records += reached.records
        self.saw(shard_id, reached.lag_ms)

    def saw(self, shard_id: str, lag_ms: int | None) -> None:
        if lag_ms is not None:
            self.lags[shard_id] = int(lag_ms)

    def publish(self, ended: set[str]) -> None:
        for sid in ended & self.lags.keys():  # a finished shard lags no more
            del self.lags[sid]
        now = time.monotonic()
        if self.lags and now - self._logged >= self.s.options.lag_log_interval:
            self._logged = now
            log.info("MillisBehindLatest: %s", ", ".join(f"{sid}={ms}" for sid, ms in sorted(self.lags.items())))
        if not self.s.report_dir:
            return
        try:
            write_report_file(self.s.report_dir, 0, self.s.report_pid, {"records": self.records, "lag ms": self.lags})
        except OSError as exc:  # the report is for people; reading goes on without it
            log.warning("stage %r: could not write its report to %s: %s", self.s.stage, self.s.report_dir, exc)


def _registry(offset: dict[str, Any]) -> dict[str, Any]:
    """What an offset says about the shards (not which ones its batch reads)."""
    return {"shards": offset["shards"], "ended": offset["ended"]}


def _key(pos: Position | None) -> tuple[int, int]:
    return position_key(pos.seq, pos.subseq) if pos else position_key(None, None)


def take(
    framer: Framer,
    shard_id: str,
    records: list[dict[str, Any]],
    after: tuple[int, int] | None,
    room: int | None,
    stop: tuple[int, int] | None,
) -> tuple[list[bytes], Position | None, bool]:
    """The messages of ``records`` — at most ``room`` of them, none past the position ``stop``.

    Returns them, the position of the last one, and whether the records were cut short
    (then the position may lie inside a KPL aggregate: ``complete`` is false).
    """
    messages, last = framer.frame(shard_id, records, after)
    if (room is None or len(messages) <= room) and (stop is None or last is None or _key(last) <= stop):
        return messages, last, False
    out: list[bytes] = []
    pos: Position | None = None
    for r in records:
        seq = r["SequenceNumber"]
        got, _ = framer.frame(shard_id, [r], after)
        first = after[1] + 1 if after is not None and after[0] == int(seq) else 0
        for i, message in enumerate(got):
            sub = first + i
            if (room is not None and len(out) >= room) or (stop is not None and position_key(seq, sub) > stop):
                return out, pos, True
            out.append(message)
            pos = Position(seq, sub, i == len(got) - 1)
    return out, pos, True


__all__ = ["KinesisReader", "KinesisSource", "take"]
