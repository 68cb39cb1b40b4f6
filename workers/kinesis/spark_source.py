"""The Kinesis extractor as a native Spark streaming source (``etlstage run --engine spark``).

``native_source(spark, ctx)`` parses the stage's arguments with the extractor's own
parser, registers the ``etlstage-kinesis`` data source and returns a streaming DataFrame
with one column ``value: binary``: one row per user record, byte for byte the message the
``etlstage-kinesis`` worker writes for it (same envelope, data encoding, marker handling
and KPL de-aggregation: :mod:`.output` and :mod:`.kpl` do the work).

Micro-batches (:mod:`.spark_reader`)
    The driver plans: it lists the shards (at most every ``--shard-sync-interval``
    seconds, and after a shard ended), registers new ones as the extractor does
    (:func:`.shards.plan_new`), and picks the shards to read: open shards whose parents
    all reached SHARD_END and that have records — a shard whose last read stopped at its
    record limit behind the tip does, any other is asked with one ``GetRecords(Limit=1)`` (at most every
    ``--idle-sleep`` seconds, except under available-now).  Each picked shard is one input
    partition, read by one task with its share of the batch's record limit
    (``--max-records-per-cycle``, or Spark's ``ReadMaxRows``: split evenly among the
    shards the batch reads, as the worker splits a cycle, so a micro-batch holds what a
    window holds under the supervisor).  Offsets
    (:mod:`.spark_offsets`) hold every shard's position, the finished shards, and the
    shards the batch reads with their limits.  New shards (with a pinned ``LATEST`` start
    time) and shards found finished go into an offset even when nothing is to be read: a
    micro-batch with no rows, so that a restart starts from the same view.

Exact replay
    A GetRecords call with a limit may stop anywhere before it, so an offset cannot say
    where a batch will end.  Instead the task that reads shard S in batch B writes where it
    stopped (last sequence and sub-sequence number, whether the shard ended or the limit
    cut it short) to ``<ctx.checkpoint>/kinesis-reached/B/S.json`` on the driver, through its
    line (``ctx.keep``) — fsync'd, written once
    (a hard link: a second attempt never replaces it) — before its rows leave the task.
    The driver plans batch B+1 (``latestOffset``) only after batch B committed, from those
    reached positions.  When Spark replays batch B (its commit was not logged), each task
    finds its file and reads exactly up to the recorded end, whatever more the shard holds
    by then; a shard that cannot reach it any more (records past retention) fails the
    batch rather than give different rows.  Files of batches before the last committed
    one are removed on commit.

Available-now (``ctx.once``): the query ends once a planning round finds every shard
caught up (or finished, or waiting for parents).  Retries of throttled and failed calls
follow :mod:`.retry`; credentials come only from boto3's chain in the Spark processes;
nothing secret is passed in the source's options or logged.  The region and endpoint are
resolved where the query is built (the stage's environment, a service's exports) and
passed in the options: a Spark Connect server's processes do not have that environment.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from etlstage_workers.kinesis.client import make_client, region_of
from etlstage_workers.kinesis.options import Options, build_parser, options_from_args

from etlstage.errors import ConfigError, EtlstageError
from etlstage.native import NativeContext, parse_argv
from etlstage.protocol.markers import Markers
from etlstage.protocol.vocabulary import StageType

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SOURCE_NAME = "etlstage-kinesis"
log = logging.getLogger("etlstage.kinesis")

# Options of the worker that Spark itself takes over (ignored, with a log line): the checkpoint (Spark's), threads
# (one task per shard), cycle pacing (the trigger), read-ahead, logging (the engine's).
NOT_UNDER_SPARK = {
    "parallel": "--parallel (Spark reads each shard in a task of its own)",
    "max_cycle_seconds": "--max-cycle-seconds (the query's trigger paces micro-batches)",
    "read_ahead": "--no-read-ahead (Spark plans the next batch when the previous one committed)",
    "log_format": "--log-format (the engine configures logging)",
    "syslog_address": "--syslog-address (the engine configures logging)",
}


@dataclass(frozen=True)
class Settings:
    """Everything the driver and the tasks need, passed to the data source as its options."""

    stage: str
    options: Options
    markers: Markers
    checkpoint: str
    once: bool
    report_dir: str = ""  # the stage's state directory: where its report (lag, records) goes
    report_pid: int = 0  # the etlstage process that built the query: the report is this run's
    keep: str = ""  # the context's KeepOnce as an option: tasks record reached positions on the driver

    def to_options(self) -> dict[str, str]:
        return {
            "stage": self.stage,
            "kinesis": json.dumps(asdict(self.options), separators=(",", ":")),
            "markers": self.markers.to_option(),
            "checkpoint": self.checkpoint,
            "once": "true" if self.once else "false",
            "report": json.dumps([self.report_dir, self.report_pid]),
            "keep": self.keep,
        }

    @classmethod
    def from_options(cls, options: Any) -> Settings:
        report_dir, report_pid = json.loads(options.get("report", '["", 0]'))
        return cls(
            stage=options["stage"],
            options=Options(**json.loads(options["kinesis"])),
            markers=Markers.from_option(options["markers"]),
            checkpoint=options["checkpoint"],
            once=options["once"] == "true",
            report_dir=report_dir,
            report_pid=int(report_pid),
            keep=options.get("keep", ""),
        )


def settings_from(ctx: NativeContext) -> Settings:
    """The stage's arguments parsed and checked as the worker would; ConfigError names the stage."""
    where = ctx.where
    if ctx.stage.type != StageType.E:
        raise ConfigError([f"{SOURCE_NAME} is an E stage; this stage has type {str(ctx.stage.type)!r}"], where)
    parser = build_parser()
    parser.set_defaults(stream=ctx.env.get("ETLSTAGE_KINESIS_STREAM"))
    ns = parse_argv(ctx, parser, NOT_UNDER_SPARK)
    try:
        options = options_from_args(ns)
        options.region = (
            options.region
            or region_of(options.stream)
            or ctx.env.get("AWS_REGION")
            or ctx.env.get("AWS_DEFAULT_REGION")
        )
        options.profile = options.profile or ctx.env.get("AWS_PROFILE")
        # Resolved here, where the stage's environment is (a service's export): Spark's
        # processes (a Spark Connect server's) may not have it. Credentials are not: they
        # come from boto3's chain where the reads run.
        options.endpoint_url = (
            options.endpoint_url or ctx.env.get("AWS_ENDPOINT_URL_KINESIS") or ctx.env.get("AWS_ENDPOINT_URL")
        )
        make_client(options.stream, options.region, options.endpoint_url, options.profile)  # a region at all?
    except ConfigError as exc:
        raise ConfigError(exc.problems, where) from None
    except EtlstageError as exc:
        raise ConfigError([str(exc)], where) from None
    return Settings(
        ctx.stage.name,
        options,
        ctx.stage.markers,
        ctx.checkpoint,
        ctx.once,
        report_dir=ctx.state_dir,
        report_pid=os.getpid(),
        keep=ctx.keep.to_option() if ctx.keep is not None else "",
    )


def native_source(spark: SparkSession, ctx: NativeContext) -> DataFrame:
    """The stage as a streaming DataFrame of one column ``value: binary`` (one message per row)."""
    from etlstage_workers.kinesis.spark_reader import KinesisSource

    settings = settings_from(ctx)
    spark.dataSource.register(KinesisSource)
    return spark.readStream.format(SOURCE_NAME).options(**settings.to_options()).load()


def has_new(ctx: NativeContext, committed: dict[str, Any]) -> bool:
    """Whether an available-now query planning from ``committed`` (its last batch's offset)
    would run a batch: the source's own planning round, run on the driver without Spark
    (the engine asks before starting Spark for a ``--once`` run; etlstage.spark.driver.idle).
    Like Spark's first round it records the committed batch's positions in the worker's store."""
    from etlstage_workers.kinesis.spark_reader import KinesisReader
    from pyspark.sql.streaming.datasource import ReadMaxRows

    reader = KinesisReader(settings_from(ctx))
    reader.prepareForTriggerAvailableNow()
    return reader.latestOffset(committed, ReadMaxRows(reader.o.max_records_per_cycle)) != committed


native_source.has_new = has_new  # type: ignore[attr-defined]

__all__ = ["SOURCE_NAME", "Settings", "has_new", "native_source", "settings_from"]
