"""The Kinesis E-worker: cycles of records read ahead, checkpoints on ack.

Cyclic mode, worker-managed offsets (docs/protocol.md: windows): a background reader
(:mod:`.readahead`) reads rounds of one GetRecords per readable shard into a bounded
buffer while the previous window is loaded; ``extract`` hands the buffer out as the
cycle and remembers, per shard, the position of the last record in it (and whether the
shard ended).  Those positions are committed by ``on_window_done`` — called when the
*next* request arrives, i.e. when everything emitted before is loaded.  Nothing read
ahead is ever committed early, and stdin EOF commits nothing.  A restarted worker starts
again from the committed checkpoint, so an unacknowledged window and whatever was read
ahead are read again (at-least-once, never a gap).

Plain mode reads every shard to its tip (children after their parents, in the same
run), then ends.  It never commits: a plain run is one window whose end the worker
cannot see acknowledged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from etlstage_workers.kinesis.client import KinesisApi, make_client, stream_key
from etlstage_workers.kinesis.options import Options
from etlstage_workers.kinesis.output import Framer, Position
from etlstage_workers.kinesis.readahead import ReadAhead, Round, shares
from etlstage_workers.kinesis.retry import Backoff, RateLimit, error_code
from etlstage_workers.kinesis.shards import iterator_from, owner, plan_new, unfinished_parents
from etlstage_workers.kinesis.store import CheckpointStore, Commit, ShardRow

from etlstage.errors import ConfigError
from etlstage.worker import Extractor, Request

log = logging.getLogger("etlstage.kinesis")

GONE = "etlstage:gone"  # key of a synthetic reply: the shard's iterator request said ResourceNotFound


@dataclass
class Cursor:
    """One owned shard as this run sees it."""

    row: ShardRow
    rate: RateLimit
    iterator: str | None = None
    position: Position | None = None  # last record emitted in this run
    ended: bool = False  # null NextShardIterator seen in this run
    at_tip: bool = False  # plain mode: caught up
    caught_up: bool = False  # the last reply was short with no lag: nothing more to read now
    lag_ms: int | None = None
    latest_now: bool = False  # the first iterator of a LATEST shard: really LATEST
    waiting_logged: bool = field(default=False, repr=False)

    @property
    def shard_id(self) -> str:
        return self.row.shard_id


class KinesisExtractor(Extractor):
    def __init__(self, options: Options, client: Any = None) -> None:
        self.options = options
        self._client = client
        self._cursors: dict[str, Cursor] = {}
        self._rows: dict[str, ShardRow] = {}
        self._pending: dict[str, Commit] = {}  # positions of the cycle emitted last, committed on the next request
        # The reader thread and the request loop share the shard rows, cursors' rows and the store.
        self._lock = threading.Lock()
        self._ahead: ReadAhead | None = None
        self._last_sync = 0.0
        self._sync_needed = True
        self._last_lag_log = time.monotonic()
        self.records_out = 0
        self._pool: ThreadPoolExecutor | None = None

    # --- life cycle ---------------------------------------------------------------------

    def setup(self) -> None:
        sc = self.scenario
        o = self.options
        if sc.type != "E":
            raise ConfigError([f"the Kinesis extractor is an E-worker; ETLSTAGE_TYPE is {sc.type!r}"])
        if sc.mode == "cyclic" and sc.offsets != "worker":
            raise ConfigError(["the Kinesis extractor keeps its own per-shard checkpoints: use offsets: worker"])
        state_dir = o.state_dir or sc.state_dir or None
        if sc.mode == "cyclic" and not state_dir:
            raise ConfigError(["cyclic mode needs a state directory for checkpoints: ETLSTAGE_STATE_DIR, --state-dir"])
        self.store = CheckpointStore(state_dir, stream_key(o.stream))
        self.framer = Framer(
            sc.markers,
            envelope=o.envelope,
            data_encoding=o.data_encoding,
            on_marker=o.on_marker,
            deaggregate_kpl=o.deaggregate,
        )
        client = self._client or make_client(o.stream, o.region, o.endpoint_url, o.profile)
        self.api = KinesisApi(client, o.stream, Backoff(o.backoff_base_ms, o.max_retries))
        if o.parallel > 1:
            self._pool = ThreadPoolExecutor(o.parallel, thread_name_prefix="kinesis-get")
        self._sync()
        log.info(
            "instance %d/%d reads %d of %d shards of %s (state %s)",
            sc.instance,
            sc.instances,
            len(self._cursors),
            len(self._rows),
            o.stream,
            self.store.path,
        )

    def teardown(self) -> None:
        # stdin EOF: maybe the supervisor died — commit nothing (read-ahead records are
        # dropped: they were never emitted), only leave the lag stats
        if self._ahead is not None:
            self._ahead.close()
        with self._lock:
            self._log_lag(force=True)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self.store.close()

    def report(self) -> dict[str, object]:
        """Records read by this process and each shard's MillisBehindLatest, for the supervisor."""
        lags = {c.shard_id: c.lag_ms for c in list(self._cursors.values()) if c.lag_ms is not None}
        report: dict[str, object] = {"records": self.records_out, "lag ms": lags}
        if self._ahead is not None:
            report["read ahead"] = {"held": self._ahead.held, "peak": self._ahead.peak}
        return report

    def extract(self, request: Request | None) -> Iterable[bytes]:
        if request is None:
            return self._plain()
        return self._cycle()

    def on_window_done(self, request: Request) -> None:
        """The previous cycle's messages are loaded: its positions become checkpoints."""
        if not self._pending:
            return
        commits = list(self._pending.values())
        with self._lock:
            self.store.commit(commits)
            for c in commits:
                if c.ended:
                    self._rows[c.shard_id].ended = True
                    log.info("%s: SHARD_END committed", c.shard_id)
        self._pending.clear()

    # --- cyclic and plain ---------------------------------------------------------------

    def _cycle(self) -> list[bytes]:
        if self._ahead is None:
            o = self.options
            self._ahead = ReadAhead(
                self._round,
                max_records=o.max_records_per_cycle,
                max_seconds=o.max_cycle_seconds,
                idle_sleep=o.idle_sleep,
                eager=o.read_ahead,
            )
        asked = time.monotonic()
        cycle = self._ahead.take()
        log.debug(
            "cycle: %d records after %.3fs (%d held on)",
            len(cycle.messages),
            time.monotonic() - asked,
            self._ahead.held,
        )
        self._pending = cycle.commits
        self.records_out += len(cycle.messages)
        return cycle.messages

    def _round(self, room: int) -> Round:
        """Reader thread: a GetRecords per readable shard, ``room`` records at most in all.

        What a shard does not take of its share (it is caught up, or ended) goes at once to
        the shards whose replies were full, so a backlog fills the cycle in one round rather
        than leaving a few records for a window of their own.
        """
        with self._lock:
            self._maybe_sync()
            cursors = self._readable(in_run=False)
            self._pin_latest(cursors)
        messages: list[bytes] = []
        commits: dict[str, Commit] = {}
        pending, left = cursors, room
        while pending and left > 0:
            limits = shares(left, len(pending), self.options.limit)
            asked = [(cur, n) for cur, n in zip(pending, limits, strict=True) if n > 0]
            fetched = self._fetch_all(asked)
            full = set()
            with self._lock:
                for (cur, n), (reply, after) in zip(asked, fetched, strict=True):
                    got = self._apply(cur, reply, after, commits)
                    messages += got
                    left -= len(got)  # a KPL aggregate counts its user records (the last may overshoot)
                    records = len(reply.get("Records") or [])
                    cur.caught_up = records < n and not reply.get("MillisBehindLatest")
                    if records == n and not cur.ended:
                        full.add(cur.shard_id)
            pending = [c for c in pending if c.shard_id in full or all(c is not cur for cur, _ in asked)]
        with self._lock:
            self._log_lag()
        caught_up = all(cur.caught_up or cur.ended for cur in cursors)
        return Round(messages, commits, caught_up)

    def _plain(self) -> Iterator[bytes]:
        while True:
            self._maybe_sync()
            active = [c for c in self._readable(in_run=True) if not c.at_tip]
            if not active:
                if self._sync_needed:
                    continue
                break
            self._pin_latest(active)
            asked = [(cur, self.options.limit) for cur in active]
            for (cur, _), (reply, after) in zip(asked, self._fetch_all(asked), strict=True):
                messages = self._apply(cur, reply, after, {})  # plain mode never commits
                self.records_out += len(messages)
                yield from messages
        self._log_lag(force=True)

    # --- shards -------------------------------------------------------------------------

    def _maybe_sync(self) -> None:
        if self._sync_needed or time.monotonic() - self._last_sync >= self.options.shard_sync_interval:
            self._sync()

    def _sync(self) -> None:
        """List the stream's shards; register new ones; make cursors for the ones we own."""
        listed = self.api.list_shards()
        known = self.store.rows()
        new = plan_new(listed, known, self.options.initial_position, self.options.timestamp)
        if new:
            self.store.register(new)
            known = self.store.rows()
            log.info("new shards: %s", ", ".join(f"{r.shard_id} ({r.start_type})" for r in new))
        # keep the in-run view of ended rows we committed ourselves
        for sid, row in self._rows.items():
            if row.ended and sid in known:
                known[sid].ended = True
        self._rows = known
        sc = self.scenario
        for sid, row in known.items():
            if sid not in self._cursors and owner(sid, sc.instances) == sc.instance and not row.ended:
                self._cursors[sid] = Cursor(row, RateLimit(self.options.max_gets_per_second))
            elif sid in self._cursors:
                self._cursors[sid].row = row
        self._last_sync = time.monotonic()
        self._sync_needed = False

    def _readable(self, in_run: bool) -> list[Cursor]:
        """Owned shards not ended whose parents all reached SHARD_END (committed; or, in_run, in this run)."""
        out = []
        foreign: set[str] = set()

        def ended_in_run(sid: str) -> bool:
            return self._ended_in_run(sid, in_run)

        for cur in self._cursors.values():
            if cur.ended or cur.row.ended:
                continue
            foreign.update(unfinished_parents(cur.row, self._rows, ended_in_run))
        if foreign:  # another instance may have finished them since we looked
            for sid in self.store.ended(foreign):
                self._rows[sid].ended = True
        for cur in sorted(self._cursors.values(), key=lambda c: c.shard_id):
            if cur.ended or cur.row.ended:
                continue
            waiting = unfinished_parents(cur.row, self._rows, ended_in_run)
            if waiting:
                if not cur.waiting_logged:
                    log.info("%s waits for its parent(s) %s to reach SHARD_END", cur.shard_id, ", ".join(waiting))
                    cur.waiting_logged = True
                continue
            out.append(cur)
        return out

    def _ended_in_run(self, shard_id: str, in_run: bool) -> bool:
        cur = self._cursors.get(shard_id)
        return in_run and cur is not None and cur.ended

    # --- reading ------------------------------------------------------------------------

    def _start(self, cur: Cursor) -> tuple[str, tuple[int, int] | None]:
        """A fresh iterator from the last position (this run's, else the checkpoint)."""
        row = cur.row
        pos = cur.position
        seq, sub, complete = (pos.seq, pos.subseq, pos.complete) if pos else (row.seq, row.subseq, row.complete)
        latest_now, cur.latest_now = cur.latest_now, False
        return iterator_from(self.api, row, seq, sub, complete, latest_now)

    def _pin_latest(self, cursors: list[Cursor]) -> None:
        """Before a first LATEST iterator, store the time: a restart before any checkpoint
        then resumes AT_TIMESTAMP from it and loses nothing.  (Main thread: SQLite.)"""
        for cur in cursors:
            row = cur.row
            if (
                cur.iterator is None
                and cur.position is None
                and row.seq is None
                and row.start_type == "LATEST"
                and row.start_ts is None
            ):
                now = time.time()
                self.store.fix_start(cur.shard_id, "LATEST", now)
                row.start_ts = now
                cur.latest_now = True

    def _fetch_all(self, asked: list[tuple[Cursor, int]]) -> list[tuple[dict[str, Any], tuple[int, int] | None]]:
        """One GetRecords per (cursor, limit) — in parallel threads when asked; replies in order."""
        if self._pool is not None and len(asked) > 1:
            return list(self._pool.map(lambda job: self._fetch(*job), asked))
        return [self._fetch(cur, limit) for cur, limit in asked]

    def _fetch(self, cur: Cursor, limit: int) -> tuple[dict[str, Any], tuple[int, int] | None]:
        """Network only (may run in a pool thread): iterator if needed, one GetRecords."""
        after: tuple[int, int] | None = None
        if cur.iterator is None:
            try:
                cur.iterator, after = self._start(cur)
            except Exception as exc:
                if error_code(exc) != "ResourceNotFoundException":
                    raise
                return {"Records": [], "NextShardIterator": None, GONE: exc}, None
        try:
            reply = self.api.get_records(cur.iterator, limit, cur.shard_id, cur.rate)
        except Exception as exc:
            if error_code(exc) != "ExpiredIteratorException":
                raise
            log.info("%s: iterator expired; a fresh one from the last position", cur.shard_id)
            cur.iterator, after = self._start(cur)
            reply = self.api.get_records(cur.iterator, limit, cur.shard_id, cur.rate)
        return reply, after

    def _apply(
        self, cur: Cursor, reply: dict[str, Any], after: tuple[int, int] | None, commits: dict[str, Commit]
    ) -> list[bytes]:
        """Frame a reply's records; move the cursor; note the shard's new position in ``commits``."""
        if GONE in reply:
            self._check_gone(cur, reply[GONE])
        records = reply.get("Records") or []
        messages, last = self.framer.frame(cur.shard_id, records, after)
        cur.iterator = reply.get("NextShardIterator")
        lag = reply.get("MillisBehindLatest")
        cur.lag_ms = lag
        if last is not None:
            cur.position = last
        if not records and not lag:
            cur.at_tip = True
        if cur.iterator is None:
            cur.ended = True
            self._sync_needed = True  # its children can now be found and, once it is committed, read
            log.info(
                "%s: end of shard reached (children: %s)",
                cur.shard_id,
                ", ".join(c["ShardId"] for c in reply.get("ChildShards") or []) or "none listed",
            )
        if last is not None or cur.ended:
            p = cur.position
            commits[cur.shard_id] = Commit(
                cur.shard_id, p.seq if p else None, p.subseq if p else None, p.complete if p else True, cur.ended
            )
        return messages

    def _check_gone(self, cur: Cursor, exc: Exception) -> None:
        """A shard we track has no iterator any more: fine only if the stream no longer lists it."""
        if cur.shard_id in {s["ShardId"] for s in self.api.list_shards()}:
            raise exc
        log.warning(
            "%s no longer exists (past the stream's retention period?): marked ended; records it held "
            "that were not read before cannot be read any more",
            cur.shard_id,
        )

    # --- lag ----------------------------------------------------------------------------

    def _log_lag(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_lag_log < self.options.lag_log_interval:
            return
        self._last_lag_log = now
        lags = {c.shard_id: c.lag_ms for c in self._cursors.values() if c.lag_ms is not None}
        if not lags:
            return
        log.info("MillisBehindLatest: %s", ", ".join(f"{sid}={ms}" for sid, ms in sorted(lags.items())))
        try:
            self.store.write_lag(self.scenario.instance, lags)
        except Exception as exc:  # stats are optional, reading is not
            log.warning("could not write lag stats to %s: %s", self.store.path, exc)
