"""The loader: a Delta table's MERGE per batch (``--format delta``), or, for plain files,
stage, record, publish — and recover on start-up.

Delta (:mod:`.lake`): the batch is parsed here, its repeats dropped, and the writer thread
merges it by key into its tables, one Delta commit each; the table is the only record of
what was loaded, so there is nothing to claim, publish or recover.

Plain files (parquet, json, orc, csv), one batch in order (each step durable before the next):

1. parse the batch, key every message, drop keys seen earlier in the batch;
2. claim the keys in the key index (a transaction): keys committed by an earlier batch
   are duplicates and skipped; keys held by a batch still in flight elsewhere are waited for;
3. stage the remaining rows (pyarrow Parquet), let Spark write the output format into the
   batch's staging directory, fsync it, record the intent (state ``staged``);
4. publish: rename the staged files into the dataset, fsync the directories;
5. mark the batch committed; the future ``load()`` returned completes and the SDK writes EOP.

Step 1 and the staging of the input run in ``load()``; the claim runs on a claim thread,
the rest on one writer thread: batch N+2 is parsed while N+1 is claimed and N written.
Keys cannot collide unseen across them: N holds its keys as ``claimed``, and N+1 waits
for N to commit (then they are duplicates) or to fail (then they are free).

A crash before 3 leaves a claim that start-up recovery drops (the batch was never
acknowledged, so it comes again); a crash after 3 leaves an intent that recovery
finishes.  Either way each key is published exactly once.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from etlstage_workers.spark import lake
from etlstage_workers.spark import publish as pub
from etlstage_workers.spark.config import LoaderConfig
from etlstage_workers.spark.extract import Prepared, prepare
from etlstage_workers.spark.keystore import CLAIMED, COMMITTED, STAGED, KeyStore
from etlstage_workers.spark.session import LazySession, start_session
from etlstage_workers.spark.staged import stage_input, write_staged

from etlstage.errors import ConfigError, EtlstageError
from etlstage.sparkapi import check_master_reachable, default_parallelism, find_java
from etlstage.worker import Loader

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("etlstage.spark")


class ClaimTimeout(EtlstageError):
    """Keys of this batch stay held by another instance's unfinished batch (exit 1: nothing
    acknowledged, the supervisor sends the batch again)."""


class SparkLoader(Loader):
    max_pending = 2  # batches being claimed and written while the next one is parsed

    def __init__(self, config: LoaderConfig, spark: SparkSession | None = None) -> None:
        """``spark``: an existing session to use (embedding, tests); it is left running at teardown."""
        self._report: dict[str, Any] = {"rows": {}, "duplicates skipped": 0, "messages": 0}
        self.config = config
        self.output = config.output if lake.is_uri(config.output) else os.path.abspath(config.output)
        self._own_spark = spark is None
        self._session = LazySession(self._start_spark, given=spark)
        self._conf: dict[str, str] = {}
        self._claimer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="key-claim")
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spark-write")
        self._failed_write: BaseException | None = None
        self._counts_lock = threading.Lock()  # the writer thread adds rows, the SDK reads the report
        self.store: KeyStore | None = None
        self._parallelism: int | None = None

    # --- life cycle ------------------------------------------------------------------

    def setup(self) -> None:
        sc = self.scenario
        refused = self.config.concurrent_writers_problem(sc.instances)
        if refused:  # before Spark starts: the stage stops at once, naming the fix
            raise ConfigError([refused], f"stage {sc.stage!r}")
        if not sc.is_batch:
            log.warning("mode %r: one Spark job per message is slow; run this stage with mode: batch", sc.mode)
        if not lake.is_uri(self.output):
            os.makedirs(self.output, exist_ok=True)
        if not self.config.is_table:
            self.store = KeyStore(self.key_index_path())
        if self._own_spark:
            self._conf = self._session_conf()
        if self.store is not None:
            self.recover()
        where = f"{self.config.format}, merged by key" if self.store is None else self.config.format
        index = "" if self.store is None else f"; key index {self.store.path}"
        log.info("loading into %s (%s) with master %s%s", self.output, where, self.config.master, index)
        if self._own_spark:
            log.info("start-up: Spark starts with the first batch (a run with nothing to load starts no JVM)")

    def _session_conf(self) -> dict[str, str]:
        """The session's settings, its jars fetched now (once, into the cache), and the checks
        that need no JVM: a missing jar, Java or master stops the stage at start, not at its
        first batch."""
        began = time.perf_counter()
        conf = merge_conf(lake.session_conf(self.config), self.config.conf)
        jars = [j for j in conf.get("spark.jars", "").split(",") if j]
        if jars:
            sets = ", ".join(lake.package_sets(self.config)) or "--conf"
            log.info("start-up: %d jars (%s) ready in %.1fs", len(jars), sets, time.perf_counter() - began)
        check_master_reachable(self.config.master, self.config.connect_timeout)
        if not self.config.master.startswith("sc://"):
            find_java()
        return conf

    def _start_spark(self) -> SparkSession:
        """The session (:class:`LazySession` calls this once, on a thread of its own)."""
        sc = self.scenario
        began = time.perf_counter()
        log.info("start-up: starting Spark (master %s) for the first batch", self.config.master)

        def jvm_up() -> None:
            log.info("start-up: Spark's JVM is running (%.1fs)", time.perf_counter() - began)

        spark = start_session(
            self.config.master,
            f"{self.config.app_name}[{sc.stage}/{sc.instance}]",
            self._conf,
            connect_timeout=self.config.connect_timeout,
            log_level=self.config.spark_log_level,
            plain_files=not self.config.is_table,
            on_jvm=jvm_up,
        )
        log.info("start-up: Spark session ready in %.1fs", time.perf_counter() - began)
        return spark

    def teardown(self) -> None:
        # Normally every batch is acknowledged by now; after a failure, queued ones are
        # dropped and their keys freed (another instance may be waiting for them).
        self._writer.shutdown(wait=True, cancel_futures=True)
        self._claimer.shutdown()
        if self.store is not None:
            for batch, state in self.store.unfinished(self.scenario.instance):
                if state == CLAIMED:
                    self._drop_unstaged(batch)
            log.info("stats for %s: %s", self.output, self.store.stats())
            self.store.close()
        spark = self._session.started() if self._own_spark else None  # one never begun stays so
        if spark is not None:
            spark.stop()

    def key_index_path(self) -> str:
        state_dir = self.config.state_dir or self.scenario.state_dir or os.path.join(self.output, "_etlstage_state")
        os.makedirs(state_dir, exist_ok=True)
        digest = hashlib.sha256(self.output.encode()).hexdigest()[:12]
        return os.path.join(state_dir, f"spark-load-{digest}.sqlite")

    @property
    def session(self) -> SparkSession:
        """The Spark session (given, or started now if no batch started it yet: waits for it)."""
        return self._session.get()

    @property
    def parallelism(self) -> int:
        """Spark's cores: the files a batch's input is staged into (asks the session once)."""
        if self._parallelism is None:
            self._parallelism = default_parallelism(self.session)
        return self._parallelism

    @property
    def batch_prefix(self) -> str:
        return f"i{self.scenario.instance}-"

    # --- recovery --------------------------------------------------------------------

    def recover(self) -> None:
        """Finish what a crash left: publish recorded intents, drop unrecorded staging."""
        assert self.store is not None
        for batch, state in self.store.unfinished(self.scenario.instance):
            if state == STAGED:
                moved = pub.publish(self.output, batch)
                self.store.mark_committed(batch)
                log.warning("recovery: batch %s was staged; published (%d files moved now)", batch, moved)
            else:
                self.store.release(batch)
                log.warning("recovery: batch %s was claimed but not staged; dropped (it will be sent again)", batch)
            pub.remove(self.output, batch)
        for batch in pub.leftovers(self.output, self.batch_prefix):
            if self.store.state_of(batch) in (None, COMMITTED):
                pub.remove(self.output, batch)
                log.warning("recovery: removed staging leftovers of batch %s", batch)

    # --- one batch -------------------------------------------------------------------

    def report(self) -> dict[str, object]:
        """Rows written per table and duplicates skipped by this process, for the run summary."""
        with self._counts_lock:
            return {
                "output": f"Delta tables under {self.output}",
                "messages": self._report["messages"],
                "rows": dict(self._report["rows"]),
                "duplicates skipped": self._report["duplicates skipped"],
            }

    def load(self, messages: list[bytes]) -> Future[None]:
        """Parse and stage the batch here; its keys are claimed and Spark writes it in the background.

        Three steps overlap across consecutive batches: batch N+2 is parsed here while
        N+1's keys are claimed (SQLite, one thread) and N is written (Spark, one thread).
        The returned future completes when the batch is published and committed; the SDK
        acknowledges it then.  Claims and writes each run one batch at a time, in order.
        """
        with self._counts_lock:
            self._report["messages"] += len(messages)
        batch = self._batch_name()
        if batch is None:  # its id is recorded committed: loaded before, nothing to do
            done: Future[None] = Future()
            done.set_result(None)
            return done
        self._session.begin()  # the first batch starts Spark, while it is parsed here
        clock = _Clock()
        prepared = prepare(messages, self.config)
        clock.lap("parse")
        first: dict[str, int] = {}
        for pos, key in enumerate(prepared.keys):
            first.setdefault(key, pos)
        if self.store is None:  # a Delta table: merged by key, nothing staged
            # With a batch id, each table's commit carries Delta's idempotent-write pair for
            # it: a batch sent again is skipped by Delta before any join (the MERGE by key
            # alone would insert nothing either, at the cost of the join).
            txn = lake.Txn(f"etlstage-batch-{self.batch_id}", 0) if self.batch_id else None
            return self._writer.submit(self._merge, prepared, list(first.values()), len(messages), clock, txn)
        # The claim runs while the rows are staged, optimistically: almost always every key
        # is new; if not, the writer stages the input again without the duplicates.
        claim = self._claimer.submit(self.store.claim, batch, self.scenario.instance, first)
        try:
            self._write_input(batch, prepared, list(first.values()))
        except BaseException:
            with contextlib.suppress(BaseException):
                claim.result()
            self._drop_unstaged(batch)
            raise
        clock.lap("stage")
        return self._writer.submit(self._finish, _Job(batch, prepared, first, len(messages), claim, clock))

    def _batch_name(self) -> str | None:
        """The name the key index knows this batch by: after its id when it has one (stage key
        ``batch_id: true``; the id is the same whenever the same messages are sent again),
        else a fresh one. None: the id is recorded committed, so the batch was loaded before
        and is acknowledged without a parse, a claim or a Spark job. An id in flight in the
        index (not possible within one process) gets a fresh name: the keys still decide."""
        fresh = self.batch_prefix + uuid.uuid4().hex[:16]
        if self.store is None or not self.batch_id:
            return fresh
        named = f"{self.batch_prefix}{self.batch_id}"
        state = self.store.state_of(named)
        if state == COMMITTED:
            log.info("batch %s was loaded before (its id is recorded): acknowledged, nothing written", named)
            return None
        return named if state is None else fresh

    def _merge(
        self, prepared: Prepared, positions: list[int], messages: int, clock: _Clock, txn: lake.Txn | None
    ) -> None:
        """One batch into its Delta tables (:func:`.lake.commit_batch`): durable when this returns."""
        if self._failed_write is not None:
            # a later batch is not committed before an earlier one that failed (it comes again first)
            raise RuntimeError("batch not written: an earlier batch failed") from self._failed_write
        try:
            counts = lake.commit_batch(self.session, self.config, self.output, prepared, positions, txn, lap=clock.lap)
        except BaseException as exc:
            self._failed_write = self._failed_write or exc
            raise
        duplicates = messages - counts["total"]
        with self._counts_lock:
            self._report["duplicates skipped"] += duplicates
            for table, n in counts.items():
                self._report["rows"][table] = self._report["rows"].get(table, 0) + n
        pub.crash_point("committed")
        log.info(
            "batch of %d messages: %d rows inserted %s, %d duplicates skipped, %.2fs (%s)",
            messages, counts["total"], counts, duplicates, clock.total(), clock,
        )  # fmt: skip

    def _finish(self, job: _Job) -> None:
        """Settle the claim, Spark write, fsync, record, publish, commit: durable when this returns."""
        try:
            if self._failed_write is not None:
                # Batches are published in the order they are acknowledged: none after a failure.
                raise RuntimeError(f"batch {job.batch} not written: an earlier batch failed") from self._failed_write
            self._write_and_publish(job)
        except BaseException as exc:
            self._failed_write = self._failed_write or exc
            with contextlib.suppress(BaseException):
                job.claim.result()  # a claim still running must not land after the release
            self._drop_unstaged(job.batch)  # unless its intent is recorded: recovery finishes that
            raise

    def _write_and_publish(self, job: _Job) -> None:
        assert self.store is not None
        earlier = self._settle(job.batch, job.claim.result())
        job.clock.lap("wait+claim")
        positions = [pos for key, pos in job.first.items() if key not in earlier]
        duplicates = job.messages - len(job.first) + len(earlier)
        with self._counts_lock:
            self._report["duplicates skipped"] += duplicates
        if not positions:
            self.store.finish_empty(job.batch, duplicates)
            pub.remove(self.output, job.batch)
            log.info("batch %s of %d: all duplicates, nothing to write", job.batch, job.messages)
            return
        if len(positions) != len(job.first):
            self._write_input(job.batch, job.prepared, positions)
        counts = self._run_spark(job.batch, job.prepared, positions, job.clock)
        self.store.mark_staged(job.batch, counts, duplicates)
        with self._counts_lock:
            for table, n in counts.items():
                self._report["rows"][table] = self._report["rows"].get(table, 0) + n
        job.clock.lap("record")
        pub.crash_point("staged")
        pub.publish(self.output, job.batch)
        self.store.mark_committed(job.batch)
        pub.remove(self.output, job.batch)
        job.clock.lap("publish")
        pub.crash_point("committed")
        log.info(
            "batch %s: %d messages, %d rows written %s, %d duplicates skipped, %.2fs (%s)",
            job.batch,
            job.messages,
            len(positions),
            counts,
            duplicates,
            job.clock.total(),
            job.clock,
        )

    def _drop_unstaged(self, batch: str) -> None:
        """A batch that failed before its intent was recorded: free its keys, remove its files."""
        assert self.store is not None
        if self.store.state_of(batch) in (CLAIMED, None):
            self.store.release(batch)
            pub.remove(self.output, batch)

    def _settle(self, batch: str, held: dict[str, tuple[str, str | None]]) -> set[str]:
        """Keys committed by other batches (duplicates); waits while another instance holds some."""
        assert self.store is not None
        earlier = {k for k, (_, state) in held.items() if state == COMMITTED}
        pending = {k for k in held if k not in earlier}
        deadline = time.monotonic() + self.config.claim_timeout
        while pending:
            if time.monotonic() > deadline:
                others = sorted({held[k][0] for k in pending})
                raise ClaimTimeout(
                    f"{len(pending)} keys stay held by unfinished batches {', '.join(others[:5])} of another "
                    f"instance for {self.config.claim_timeout:g}s; restart that instance so it recovers, or "
                    "route each key to one instance (partition_by the key)"
                )
            time.sleep(0.2)
            held = self.store.reclaim(batch, pending)
            earlier |= {k for k, (_, state) in held.items() if state == COMMITTED}
            pending = {k for k in held if k not in earlier}
        return earlier

    def _write_input(self, batch: str, prepared: Prepared, positions: list[int]) -> None:
        stage_input(self.output, batch, prepared, positions, self.parallelism)

    def _run_spark(self, batch: str, prepared: Prepared, positions: list[int], clock: _Clock) -> dict[str, int]:
        return write_staged(self.session, self.config, self.output, batch, prepared, positions, clock.lap)


@dataclass
class _Job:
    """A parsed, staged batch on its way to Spark."""

    batch: str
    prepared: Prepared
    first: dict[str, int]  # key -> position of its first occurrence in the batch
    messages: int
    claim: Future[dict[str, tuple[str, str | None]]]  # keys other batches hold
    clock: _Clock


def merge_conf(ours: dict[str, str], users: dict[str, str]) -> dict[str, str]:
    """The loader's session settings under the user's ``--conf``; jar lists are joined."""
    conf = {**ours, **users}
    if "spark.jars" in ours and "spark.jars" in users:
        conf["spark.jars"] = f"{ours['spark.jars']},{users['spark.jars']}"
    return conf


class _Clock:
    """Seconds per phase of a batch, for the log line."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.laps: list[tuple[str, float]] = []

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps.append((name, now - self.last))
        self.last = now

    def total(self) -> float:
        return time.perf_counter() - self.start

    def __str__(self) -> str:
        return " ".join(f"{name} {seconds:.2f}" for name, seconds in self.laps)
