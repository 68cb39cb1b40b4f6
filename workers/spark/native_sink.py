"""The Spark loader as a native sink of the Spark engine: the worker's tables, written by the
engine's own Spark session, exactly once per micro-batch, idempotent by key.

``--format delta``: each micro-batch ``B`` is merged by key into the worker's Delta tables
(:func:`.lake.commit_batch`, the same code the worker runs), each commit carrying Delta's
idempotent-write pair (the query's application id, ``B``): a replayed micro-batch is
skipped by Delta, a batch the supervisor engine loaded before is skipped by the MERGE.
Nothing else is written: no staging, no sink log, no key dataset.

Plain files (parquet, json, orc, csv):

Under ``etlstage run --engine spark`` an ``etlstage-spark-load`` stage is no worker process:
the engine hands its input rows (one message each) to :func:`native_sink`, and Spark calls
:func:`SinkBatches.write` on the driver for every micro-batch ``B`` (``foreachBatch``):

1. ``B`` in the sink log (``<checkpoint>/sink-log/B``): written before, and Spark replays it
   because its own commit was not logged yet — nothing to do.
2. ``B`` staged (``<output>/_staging/spark-B/staged`` exists): a crash came while it was
   being published — publish again (renames of what is left: idempotent), log it.
3. Otherwise the worker's own steps: parse the messages (``prepare``), drop the keys loaded
   before and repeats within the batch, stage the rows, Spark writes the tables, fsync,
   mark staged, publish, add the batch's keys to the key dataset, log ``B``.

**Keys** (``--key``; the messageId in ``--rdss`` mode; the content hash without a key) live
in a Parquet dataset beside the tables, ``<output>/_keys/`` — on the output's shared file
system, so any driver of any run sees them, with no machine-local index. A batch's keys are
checked against it with Arrow's hash lookup (``is_in``) on the driver, where the batch
already is; every 64 batches its files are compacted into one.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from etlstage_workers.spark import lake
from etlstage_workers.spark import publish as pub
from etlstage_workers.spark.cli import build_parser, config_from_args
from etlstage_workers.spark.config import LoaderConfig
from etlstage_workers.spark.extract import prepare
from etlstage_workers.spark.staged import stage_input, write_staged

from etlstage.errors import ConfigError, PipelineError
from etlstage.native import NativeContext, parse_argv
from etlstage.sparkapi import default_parallelism
from etlstage.worker.durable import fsync_path, write_durably

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import DataStreamWriter

log = logging.getLogger("etlstage.spark")

KEYS = "_keys"
COMPACT_AFTER = 64  # key files before they are merged into one
# Worker options that mean nothing here (ignored, with a log line): the engine's session, no per-instance claims.
ENGINE_OWNS = {
    "master": "--master (the engine's session is used)",
    "conf": "--conf (the engine's session is used)",
    "app_name": "--app-name (the engine's session is used)",
    "connect_timeout": "--connect-timeout (the engine's session is used)",
    "spark_log_level": "--spark-log-level (the engine configures logging)",
    "state_dir": "--state-dir (keys live beside the output, the sink log in the query's checkpoint)",
    "claim_timeout": "--claim-timeout (one writer: the query's driver)",
}


def native_sink(df: DataFrame, ctx: NativeContext) -> DataStreamWriter:
    """``etlstage-spark-load`` under the Spark engine: ``df.writeStream.foreachBatch(...)``."""
    config = parse(ctx)
    if config.is_table:
        return df.writeStream.foreachBatch(TableBatches(config, ctx.name).write)
    return df.writeStream.foreachBatch(SinkBatches(config, os.path.join(ctx.checkpoint, "sink-log"), ctx.name).write)


def spark_conf(ctx: NativeContext) -> dict[str, str]:
    """The engine's session settings this sink needs (its jars, Delta's extension): the
    engine starts its session with them (:func:`etlstage.spark.driver.native.session_conf`)."""
    return lake.session_conf(parse(ctx))


native_sink.spark_conf = spark_conf  # type: ignore[attr-defined]


def gathered(batch_df: DataFrame, batch_id: int, stage: str) -> list[bytes]:
    """The micro-batch's messages, gathered on the driver (the sink parses them there).

    A micro-batch of hundreds of MB can fail there with Spark's ``TaskResultLost`` (measured:
    200–225 MB on a driver with Spark's default 1g failed two runs of three; 3g passed), and
    the same micro-batch comes again at the next run: it is planned, and a replay reads
    exactly what it read. That is said plainly, with what to do."""
    try:
        return [bytes(v) for v in batch_df.toArrow().column("value").to_pylist()]
    except Exception as exc:
        if "TaskResultLost" not in str(exc):
            raise
        raise PipelineError(
            f"stage {stage!r}: micro-batch {batch_id} could not be gathered on the Spark driver (Spark lost a "
            "task's result: TaskResultLost), as happens to micro-batches of hundreds of MB on a driver with little "
            "memory. Nothing of it was written. It is planned already and is read again as it is: give the driver "
            "more memory (engine: {conf: {spark.driver.memory: 4g}} in stages.yaml) and run again; for later "
            "micro-batches lower the extractor's --max-records-per-cycle"
        ) from None


def txn_for(batch_df: DataFrame, config: LoaderConfig, stage: str, batch_id: int) -> lake.Txn | None:
    """Delta's idempotent-write pair for micro-batch ``batch_id``: the application id is the
    streaming query's own id (kept in its checkpoint: a new checkpoint, whose micro-batch ids
    count from 0 again, is a new id, so its batches are never mistaken for the old query's)
    with the stage and the output. None when Spark does not say (the MERGE alone holds)."""
    import hashlib

    from pyspark.errors import PySparkNotImplementedError

    try:
        query_id = batch_df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
    except (PySparkNotImplementedError, AttributeError):  # Spark Connect: no SparkContext to ask
        return None
    if not query_id:
        return None
    digest = hashlib.sha256("\n".join([query_id, stage, config.output]).encode()).hexdigest()[:16]
    return lake.Txn(f"etlstage-{stage}-{digest}", batch_id)


class TableBatches:
    """Merges micro-batches into Delta tables (picklable state only: Spark keeps it on the driver)."""

    def __init__(self, config: LoaderConfig, stage: str) -> None:
        self.config = config
        self.stage = stage

    def write(self, batch_df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        messages = gathered(batch_df, batch_id, self.stage)
        if not messages:
            return
        prepared = prepare(messages, self.config)
        first: dict[str, int] = {}
        for pos, key in enumerate(prepared.keys):
            first.setdefault(key, pos)
        spark = batch_df.sparkSession
        txn = txn_for(batch_df, self.config, self.stage, batch_id)
        counts = lake.commit_batch(spark, self.config, self.config.output, prepared, list(first.values()), txn)
        pub.crash_point("committed")
        log.info(
            "micro-batch %d: %d messages, %d rows inserted %s, %d duplicates skipped, %.2fs",
            batch_id, len(messages), counts["total"], counts, len(messages) - counts["total"],
            time.monotonic() - started,
        )  # fmt: skip


def parse(ctx: NativeContext) -> LoaderConfig:
    """The worker's own options, checked as it checks them (exit 2 naming the stage), with
    the worker's rule for concurrent writers of an S3 table
    (:meth:`LoaderConfig.concurrent_writers_problem`)."""
    args = parse_argv(ctx, build_parser(), ENGINE_OWNS)
    if not lake.is_uri(args.output):
        args.output = ctx.path(args.output)
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        raise ConfigError(exc.problems, ctx.where) from None
    refused = config.concurrent_writers_problem(ctx.stage.instances)
    if refused:  # the worker's own rule (one stages.yaml, both engines), before the session starts
        raise ConfigError([refused], ctx.where)
    return config


class SinkBatches:
    """Writes micro-batches; picklable state only (Spark keeps the function on the driver)."""

    def __init__(self, config: LoaderConfig, sink_log: str, stage: str) -> None:
        self.config = config
        self.sink_log = sink_log
        self.stage = stage

    def write(self, batch_df: DataFrame, batch_id: int) -> None:
        output, batch = self.config.output, f"spark-{batch_id}"
        logged = os.path.join(self.sink_log, str(batch_id))
        if os.path.exists(logged):
            log.info("micro-batch %d was written before (a replay): skipped", batch_id)
            pub.remove(output, batch)  # what a crash right after logging it left
            return
        if not os.path.exists(_staged_mark(output, batch)):
            pub.remove(output, batch)  # leftovers of a crash before it was staged: start again
            if not self._stage(batch_df, batch, batch_id):
                _log(self.sink_log, batch_id, "nothing new")
                return
        pub.publish(output, batch)
        _publish_keys(output, batch)
        _log(self.sink_log, batch_id, "published")
        pub.remove(output, batch)
        _compact_keys(output)

    def _stage(self, batch_df: DataFrame, batch: str, batch_id: int) -> bool:
        """Parse, drop known keys, write with Spark into staging, mark staged; False if nothing new."""
        started = time.monotonic()
        messages = gathered(batch_df, batch_id, self.stage)
        read = time.monotonic()
        if not messages:
            return False
        prepared = prepare(messages, self.config)
        first: dict[str, int] = {}
        for pos, key in enumerate(prepared.keys):
            first.setdefault(key, pos)
        keys = pa.array(list(first), pa.string())
        known = _known(self.config.output, keys)
        positions = [pos for key, pos, old in zip(first, first.values(), known, strict=True) if not old]
        duplicates = len(messages) - len(positions)
        if not positions:
            log.info("%s: %d messages, all loaded before", batch, len(messages))
            return False
        spark = batch_df.sparkSession
        parallelism = default_parallelism(spark)
        stage_input(self.config.output, batch, prepared, positions, parallelism)
        staged_at = time.monotonic()
        counts = write_staged(spark, self.config, self.config.output, batch, prepared, positions)
        log.debug(
            "%s: read %.2fs, prepared and staged %.2fs, written %.2fs",
            batch,
            read - started,
            staged_at - read,
            time.monotonic() - staged_at,
        )
        new_keys = pa.table({"key": keys.filter(pc.invert(pa.array(known, pa.bool_())))})
        staging = pub.batch_dir(self.config.output, batch)
        pq.write_table(new_keys, os.path.join(staging, "keys.parquet"))
        fsync_path(os.path.join(staging, "keys.parquet"))
        write_durably(_staged_mark(self.config.output, batch), b"")
        pub.crash_point("staged")
        log.info(
            "%s: %d messages, %d rows written %s, %d duplicates skipped, %.2fs",
            batch, len(messages), len(positions), counts, duplicates, time.monotonic() - started,
        )  # fmt: skip
        return True


def _staged_mark(output: str, batch: str) -> str:
    return os.path.join(pub.batch_dir(output, batch), "staged")


def _known(output: str, keys: pa.Array) -> list[bool]:
    """Which of ``keys`` an earlier batch loaded."""
    root = os.path.join(output, KEYS)
    if not os.path.isdir(root) or not os.listdir(root):
        return [False] * len(keys)
    loaded = ds.dataset(root, format="parquet", schema=pa.schema([("key", pa.string())])).to_table(columns=["key"])
    return pc.is_in(keys, value_set=loaded.column("key").combine_chunks()).to_pylist()


def _publish_keys(output: str, batch: str) -> None:
    staged = os.path.join(pub.batch_dir(output, batch), "keys.parquet")
    if os.path.exists(staged):  # gone: moved before a crash
        os.makedirs(os.path.join(output, KEYS), exist_ok=True)
        os.replace(staged, os.path.join(output, KEYS, f"{batch}.parquet"))


def _compact_keys(output: str) -> None:
    """Many small key files into one (written, synced, then the small ones removed: a key is
    never absent, at worst present twice for a moment)."""
    root = os.path.join(output, KEYS)
    files = sorted(f for f in os.listdir(root) if f.endswith(".parquet")) if os.path.isdir(root) else []
    if len(files) < COMPACT_AFTER:
        return
    merged = pa.concat_tables(pq.read_table(os.path.join(root, f), columns=["key"]) for f in files)
    tmp = os.path.join(root, f".compact-{uuid.uuid4().hex}.tmp")
    pq.write_table(merged, tmp)
    fsync_path(tmp)
    os.replace(tmp, os.path.join(root, f"compact-{uuid.uuid4().hex}.parquet"))
    for f in files:
        os.remove(os.path.join(root, f))


def _log(sink_log: str, batch_id: int, what: str) -> None:
    os.makedirs(sink_log, exist_ok=True)
    write_durably(os.path.join(sink_log, str(batch_id)), what.encode())


__all__ = ["native_sink"]
