"""The Kafka loader as a native Spark sink (``etlstage run --engine spark``).

``native_sink(df, ctx)`` returns ``df.writeStream.foreachBatch(...)``: each micro-batch's
messages go, on the driver, through the worker's own :class:`~.loader.KafkaLoader` — no
worker process, no protocol, the same producer settings and the same rules:

- a micro-batch ends (and Spark logs its commit) only once the broker acknowledged every
  message of it (``acks=all``, idempotent producer); a failure fails the micro-batch, and
  Spark runs it again;
- ``--transactional``: the micro-batch is one Kafka transaction that also notes its
  messages' SHA-256 in the ledger topic, read to its end before each batch — so a
  micro-batch Spark replays after a crash (the same offsets, the same messages) writes
  nothing twice.  The transactional id and the ledger are the worker's (instance 0), so a
  pipeline moved between engines keeps one ledger and fences the other engine's producer.

Spark's own Kafka sink is not used: it writes at least once (a replayed micro-batch is
written again), where ``--transactional`` promises once.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from etlstage_workers.crashpoint import crash_point
from etlstage_workers.kafka.broker import BOOTSTRAP_ENV
from etlstage_workers.kafka.loader import KafkaLoader
from etlstage_workers.kafka.options import LoadOptions, build_load_parser, load_options_from_args

from etlstage.errors import ConfigError
from etlstage.native import NativeContext, parse_argv
from etlstage.protocol.scenario import Scenario
from etlstage.protocol.vocabulary import StageType

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import DataStreamWriter

log = logging.getLogger("etlstage.kafka")

NOT_UNDER_SPARK = {
    "log_format": "--log-format (the engine configures logging)",
    "syslog_address": "--syslog-address (the engine configures logging)",
}


def load_options_from(ctx: NativeContext) -> LoadOptions:
    """The stage's arguments parsed and checked as the worker parses them."""
    if ctx.stage.type != StageType.L:
        raise ConfigError(
            [f"etlstage-kafka-load is an L stage; this stage has type {str(ctx.stage.type)!r}"], ctx.where
        )
    parser = build_load_parser()
    parser.set_defaults(bootstrap=ctx.env.get(BOOTSTRAP_ENV))
    ns = parse_argv(ctx, parser, NOT_UNDER_SPARK)
    try:
        return load_options_from_args(ns, ctx.env, ctx.cwd)
    except ConfigError as exc:
        raise ConfigError(exc.problems, ctx.where) from None


class KafkaBatches:
    """Writes micro-batches with one :class:`KafkaLoader`, made on the first batch (its
    producer and ledger reader are not picklable: only the options travel)."""

    def __init__(self, options: LoadOptions, scenario: Scenario) -> None:
        self.options = options
        self.scenario = scenario
        self._loader: KafkaLoader | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_loader": None}

    def loader(self) -> KafkaLoader:
        if self._loader is None:
            loader = KafkaLoader(self.options)
            loader.scenario = self.scenario
            loader.setup()  # no teardown: each batch ends flushed (and committed, if transactional)
            self._loader = loader
        return self._loader

    def write(self, batch_df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        messages = [bytes(v) for v in batch_df.toArrow().column("value").to_pylist()]
        if not messages:
            return
        loader = self.loader()
        written, skipped = loader.written, loader.skipped
        pending = loader.load(messages)
        if pending is not None:  # Spark commits the micro-batch once this returns: the broker has it first
            pending.result()
        crash_point("ETLSTAGE_KAFKA_SINK_CRASH", "committed")  # tests: written, Spark's commit not yet logged
        log.info(
            "micro-batch %d: %d messages, %d written to %s, %d written before, %.2fs",
            batch_id, len(messages), loader.written - written, self.options.topic,
            loader.skipped - skipped, time.monotonic() - started,
        )  # fmt: skip


def native_sink(df: DataFrame, ctx: NativeContext) -> DataStreamWriter:
    """``etlstage-kafka-load`` under the Spark engine: ``df.writeStream.foreachBatch(...)``."""
    options = load_options_from(ctx)
    return df.writeStream.foreachBatch(KafkaBatches(options, ctx.stage.scenario(0, ctx.state_dir)).write)


__all__ = ["KafkaBatches", "load_options_from", "native_sink"]
