"""The etlstage side: a T-worker (a tap: inputs pass through as results) or an L-worker.

For each batch (single mode: each message) the adapter

1. classifies every message (:mod:`.records`) and groups the records by shard, keeping
   their order; records of a shard already checkpointed past them (a replay after a
   restart) are not delivered to the child again — the KCL never redelivers below a
   checkpoint — but a T-stage still passes them through;
2. per shard: starts that shard's child on first use (``initialize``), sends one
   ``processRecords`` and waits for its ``status``; a shard-end marker sends
   ``shardEnded`` after the shard's records and ends that child.  Different shards
   run in threads at the same time (``--parallel-shards``); each child still sees one
   action at a time;
3. then returns: the batch's EOP is written only after every status, so the
   supervisor's acknowledgement of the window means "the processor said done".

On stdin EOF every live child gets ``shutdownRequested``, then ``leaseLost`` (V1:
``shutdown`` ZOMBIE), its stdin is closed and it is waited for.  After a failure the
children are killed instead and the adapter exits non-zero.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

from etlstage_workers.kcl.records import Parsed, classify, now_ms
from etlstage_workers.kcl.session import ShardSession
from etlstage_workers.kcl.store import CheckpointStore

from etlstage.protocol.scenario import Scenario
from etlstage.worker import Loader, Transformer

log = logging.getLogger("etlstage.kcl")


@dataclass
class Options:
    argv: list[str]
    version: int = 2
    shard_id: str | None = None
    timeout: float = 300.0
    shutdown_timeout: float = 60.0
    checkpoint_db: str | None = None
    shutdown_requested: bool = True
    parallel_shards: int = 4
    legacy_shutdown: bool = False


class _MldDriver:
    scenario: Scenario  # set by the SDK before setup()

    def __init__(self, options: Options) -> None:
        self.options = options
        self.sessions: dict[str, ShardSession] = {}
        self.failed = False
        self.store: CheckpointStore | None = None
        self.batches = 0
        self.default_shard = ""
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()  # guards ``sessions`` across shard threads

    def setup(self) -> None:
        sc = self.scenario
        self.default_shard = self.options.shard_id or f"shardId-{sc.instance:012d}"
        path = self.options.checkpoint_db or ":memory:"
        self.store = CheckpointStore(path, sc.stage)
        log.info(
            "KCL MultiLangDaemon adapter: protocol V%d, default shard %s, checkpoints in %s, child: %s",
            self.options.version,
            self.default_shard,
            path,
            " ".join(self.options.argv),
        )

    def handle(self, messages: list[bytes]) -> None:
        try:
            self._handle(messages)
        except BaseException:
            self.failed = True
            raise

    def _handle(self, messages: list[bytes]) -> None:
        assert self.store is not None
        self.batches += 1
        now = now_ms()
        where = f"stage {self.scenario.stage!r}, batch {self.batches}"
        # shard -> its segments in input order: (records, followed by a shard end?)
        plan: dict[str, list[tuple[list[Parsed], bool]]] = {}
        for i, message in enumerate(messages):
            parsed = classify(message, self.default_shard, now, f"{where}, message {i + 1}")
            segments = plan.setdefault(parsed.shard_id, [([], False)])
            if parsed.end:
                segments[-1] = (segments[-1][0], True)
                segments.append(([], False))
            else:
                segments[-1][0].append(parsed)
        jobs = list(plan.items())
        if len(jobs) == 1 or self.options.parallel_shards <= 1:
            for shard_id, segments in jobs:
                self._run_shard(shard_id, segments)
            return
        # Shards are independent (one child each): their children work at the same time.
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.options.parallel_shards, thread_name_prefix="kcl-shard")
        futures = [self._pool.submit(self._run_shard, shard_id, segments) for shard_id, segments in jobs]
        wait(futures)
        for future in futures:  # the first failure in input order is the one reported
            error = future.exception()
            if error is not None:
                raise error

    def _run_shard(self, shard_id: str, segments: list[tuple[list[Parsed], bool]]) -> None:
        for parsed_list, ends in segments:
            if parsed_list:
                self._deliver(shard_id, parsed_list)
            if ends:
                self._end_shard(shard_id)

    def _session(self, shard_id: str) -> ShardSession:
        with self._lock:
            session = self.sessions.get(shard_id)
        if session is None:  # only this shard's thread starts its child
            o = self.options
            assert self.store is not None
            session = ShardSession(
                o.argv, shard_id, self.store, o.version, o.timeout, o.shutdown_timeout, o.legacy_shutdown
            )
            with self._lock:
                self.sessions[shard_id] = session
        return session

    def _deliver(self, shard_id: str, parsed_list: list[Parsed]) -> None:
        assert self.store is not None
        synthetic = [p for p in parsed_list if p.synthetic]
        if synthetic:
            first = self.store.allocate(shard_id, len(synthetic))
            for n, p in enumerate(synthetic, first):
                assert p.record is not None  # synthetic: a plain record
                p.record.assign(n)
        session = self._session(shard_id)
        records = [p.record for p in parsed_list if p.record is not None]
        assert len(records) == len(parsed_list)  # shard ends were taken out before
        floor = session.last_checkpoint
        if floor is not None:
            kept = [r for r in records if r.key > floor]
            if len(kept) < len(records):
                log.info(
                    "%s: %d of %d records are at or below the checkpoint %s (a replay); not delivered again",
                    shard_id,
                    len(records) - len(kept),
                    len(records),
                    floor,
                )
            records = kept
        behind = [p.millis_behind for p in parsed_list if p.millis_behind is not None]
        session.process_records(records, behind[-1] if behind else 0)

    def _end_shard(self, shard_id: str) -> None:
        session = self._session(shard_id)
        session.shard_ended()
        with self._lock:  # only now: a session that failed to end is killed by teardown
            del self.sessions[shard_id]
        log.info(
            "%s ended: %d records delivered, %d checkpoints", shard_id, session.records_delivered, session.checkpoints
        )

    def teardown(self) -> None:
        try:
            if self.failed:
                # kill first: shard threads blocked on a hung child then end within a second
                with self._lock:
                    sessions, self.sessions = list(self.sessions.values()), {}
                for s in sessions:
                    s.kill()
                if self._pool is not None:
                    self._pool.shutdown(wait=True, cancel_futures=True)
                return
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            sessions, self.sessions = list(self.sessions.values()), {}
            for i, s in enumerate(sessions):
                try:
                    s.shutdown(self.options.shutdown_requested)
                except BaseException:
                    self.failed = True
                    for rest in sessions[i:]:
                        rest.kill()
                    raise
                log.info(
                    "%s shut down: %d records delivered, %d checkpoints",
                    s.shard_id,
                    s.records_delivered,
                    s.checkpoints,
                )
        finally:
            if self.store is not None:
                self.store.close()


class KclTap(_MldDriver, Transformer):
    """T-stage: the batch's input messages are the results, after the child's status."""

    def process(self, messages: list[bytes]) -> Iterable[bytes]:
        self.handle(messages)
        return messages


class KclLoader(_MldDriver, Loader):
    """L-stage: the child's status acknowledges the batch."""

    def load(self, messages: list[bytes]) -> None:
        self.handle(messages)
