"""The Kafka extractor as a native Spark streaming source (``etlstage run --engine spark``).

``native_source(spark, ctx)`` reads the stage's topics with Spark's own Kafka source
(``spark-sql-kafka``, fetched once into the jar cache: :func:`spark_conf`) and returns a
streaming DataFrame of one column ``value: binary``: one row per record, byte for byte
the message the ``etlstage-kafka`` worker writes for it — the rows go through the
worker's own :class:`~.framing.Framer` (value or ``--envelope``, data encoding, marker
handling) in the tasks that read them.

Offsets
    Spark keeps them in the query's checkpoint: a micro-batch is a fixed range of offsets
    per partition, written to the offset log before it runs and read again exactly when
    Spark replays it, so with an idempotent sink (the Delta loader) every record is loaded
    once.  Where a new query (no checkpoint yet) starts is decided here, on the driver, with
    the worker's rules: a partition where the consumer group committed an offset starts
    there (a pipeline moved from the supervisor engine goes on where its worker stopped),
    any other as ``--start`` says.  Once Spark has logged a micro-batch's commit, its end
    offsets are committed to the group (:class:`GroupCommitter`), so a pipeline moved back
    to the supervisor engine goes on from there too (at most the micro-batch in flight is
    read again, as after any crash).
    Records lost to retention while the query was stopped fail the query (Spark's
    ``failOnDataLoss``) rather than skip silently.

Options with no meaning under Spark are dropped with a log line (:data:`NOT_UNDER_SPARK`);
``--config``, ``--config-file`` and ``ETLSTAGE_KAFKA_CONFIG_*`` (librdkafka's property
names, which Spark's Java client does not share) are refused: ``native: false`` runs the
worker process with them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from etlstage_workers.kafka.broker import BOOTSTRAP_ENV
from etlstage_workers.kafka.clientlog import client_logger
from etlstage_workers.kafka.framing import Framer
from etlstage_workers.kafka.options import Options, build_parser, default_name, options_from_args

from etlstage.errors import ConfigError
from etlstage.native import NativeContext, parse_argv
from etlstage.protocol.markers import Markers
from etlstage.protocol.vocabulary import StageType

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("etlstage.kafka")

NOT_UNDER_SPARK = {
    "max_cycle_seconds": "--max-cycle-seconds (the query's trigger paces micro-batches)",
    "lag_log_interval": "--lag-log-interval (Spark's progress reports the offsets)",
    "log_format": "--log-format (the engine configures logging)",
    "syslog_address": "--syslog-address (the engine configures logging)",
}
EARLIEST, LATEST = -2, -1  # Spark's words for them in a startingOffsets document
# Spark's Kafka timestampType (Java's TimestampType id) -> confluent-kafka's (0: none)
JAVA_TO_CONFLUENT_TS = {-1: 0, 0: 1, 1: 2}


def options_from(ctx: NativeContext) -> Options:
    """The stage's arguments parsed and checked as the worker parses them."""
    if ctx.stage.type != StageType.E:
        raise ConfigError([f"etlstage-kafka is an E stage; this stage has type {str(ctx.stage.type)!r}"], ctx.where)
    parser = build_parser()
    parser.set_defaults(bootstrap=ctx.env.get(BOOTSTRAP_ENV))
    ns = parse_argv(ctx, parser, NOT_UNDER_SPARK)
    try:
        options = options_from_args(ns, ctx.env, ctx.cwd)
    except ConfigError as exc:
        raise ConfigError(exc.problems, ctx.where) from None
    if options.config:
        raise ConfigError(
            [
                f"{', '.join(f'{options.config_from[k]} {k}' for k in sorted(options.config))}: librdkafka "
                "properties, which Spark's Kafka source does not take (native: false runs the etlstage-kafka "
                "worker with them)"
            ],
            ctx.where,
        )
    options.group = options.group or default_name(ctx.state_dir, ctx.stage.name)
    return options


def spark_conf(ctx: NativeContext) -> dict[str, str]:
    """The jars of Spark's Kafka source, for the engine's session (fetched once, then cached)."""
    from etlstage.sparkapi import JarFetchError, fetch_named

    try:
        return {"spark.jars": ",".join(str(jar) for jar in fetch_named("kafka-spark"))}
    except JarFetchError as exc:
        raise ConfigError([f"Spark's Kafka source: {exc}"], ctx.where) from None


def starting_offsets(options: Options, consumer: Any) -> dict[str, dict[str, int]]:
    """Where each partition of the (plain, not pattern) topics starts in a new query: the
    group's committed offset, else ``--start`` (earliest, latest, or the first offset at
    or after ``--timestamp``).  ``consumer``: a confluent-kafka Consumer of the group."""
    from confluent_kafka import TopicPartition

    parts = []
    for topic in options.topics:
        meta = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if meta is None or meta.error is not None:
            raise ConfigError([f"--topic {topic}: {getattr(meta, 'error', None) or 'not found'}"], "etlstage-kafka")
        parts += [TopicPartition(topic, p) for p in sorted(meta.partitions)]
    committed = {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(parts, timeout=30)}
    by_time: dict[tuple[str, int], int] = {}
    if options.start == "timestamp":
        asked = [TopicPartition(tp.topic, tp.partition, int(options.timestamp_ms or 0)) for tp in parts]
        by_time = {(tp.topic, tp.partition): tp.offset for tp in consumer.offsets_for_times(asked, timeout=30)}
    out: dict[str, dict[str, int]] = {}
    for tp in parts:
        where = (tp.topic, tp.partition)
        if committed.get(where, -1) >= 0:
            offset = committed[where]
        elif options.start == "timestamp":
            offset = by_time[where] if by_time.get(where, -1) >= 0 else LATEST  # none that late: from the end
        else:
            offset = EARLIEST if options.start == "earliest" else LATEST
        out.setdefault(tp.topic, {})[str(tp.partition)] = offset
    return out


def has_new(ctx: NativeContext, committed: dict[str, Any]) -> bool:
    """Whether a query planning from ``committed`` (Spark's Kafka offsets of the last committed
    micro-batch: ``{topic: {partition: offset}}``) may read anything: a partition whose end
    lies past its offset, a partition or topic the offsets do not hold, a pattern (its topics
    may have grown). The engine asks before starting Spark for a ``--once`` run
    (etlstage.spark.driver.idle). The end is the high watermark: past a transaction's
    committed records and marker Spark's end offset is too; an open transaction makes it
    say yes, which only starts Spark."""
    from confluent_kafka import TopicPartition

    options = options_from(ctx)
    if any(t.startswith("^") for t in options.topics) or set(committed) != set(options.topics):
        return True
    consumer = _group_consumer(options)
    try:
        for topic in options.topics:
            meta = consumer.list_topics(topic, timeout=30).topics.get(topic)
            if meta is None or meta.error is not None or {str(p) for p in meta.partitions} != set(committed[topic]):
                return True
            for p in meta.partitions:
                _, end = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                if end > int(committed[topic][str(p)]):
                    return True
        return False
    finally:
        consumer.close()


def _group_consumer(options: Options) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {"bootstrap.servers": str(options.bootstrap), "group.id": str(options.group), "enable.auto.commit": False},
        logger=client_logger(),
    )


def reader_options(options: Options, start: dict[str, dict[str, int]] | None) -> dict[str, str]:
    """Spark's Kafka source options for ``options``; ``start``: explicit starting offsets
    (plain topics), None for patterns (``--start`` then applies to every partition)."""
    patterns = [t for t in options.topics if t.startswith("^")]
    out = {
        "kafka.bootstrap.servers": str(options.bootstrap),
        "includeHeaders": "true",
        "maxOffsetsPerTrigger": str(options.max_records_per_cycle),
        "failOnDataLoss": "true",
        "kafka.isolation.level": "read_committed" if options.read_committed else "read_uncommitted",
    }
    if patterns:
        out["subscribePattern"] = "|".join(f"(?:{p[1:]})" for p in patterns)
        if options.start == "timestamp":
            out["startingTimestamp"] = str(options.timestamp_ms)
        else:
            out["startingOffsets"] = options.start
    else:
        out["subscribe"] = ",".join(options.topics)
        out["startingOffsets"] = json.dumps(start, separators=(",", ":"))
    return out


class _Row:
    """One row of Spark's Kafka source, read as the framer reads a confluent-kafka message."""

    __slots__ = ("_r",)

    def __init__(self, row: dict[str, Any]) -> None:
        self._r = row

    def topic(self) -> str | None:
        return self._r["topic"]

    def partition(self) -> int | None:
        return self._r["partition"]

    def offset(self) -> int | None:
        return self._r["offset"]

    def key(self) -> bytes | None:
        return self._r["key"]

    def value(self) -> bytes | None:
        return self._r["value"]

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return [(h["key"], h["value"]) for h in self._r["headers"] or []]

    def timestamp(self) -> tuple[int, int]:
        kind = JAVA_TO_CONFLUENT_TS.get(self._r["timestampType"], 0)
        ts = self._r["timestamp"]
        return kind, int(ts.timestamp() * 1000) if ts is not None else -1


def frame_batches(batches: Iterator[pa.RecordBatch], markers: Markers, options: Options) -> Iterator[pa.RecordBatch]:
    """Spark's Kafka rows -> the worker's messages, in a task (``mapInArrow``)."""
    import pyarrow as pa

    framer = Framer(
        markers, envelope=options.envelope, data_encoding=options.data_encoding, on_marker=options.on_marker
    )
    for batch in batches:
        rows = [_Row(r) for r in batch.to_pylist()]
        yield pa.RecordBatch.from_arrays([pa.array(framer.frame(rows), pa.binary())], names=["value"])


def source_description(options: Options) -> str:
    """How Spark's progress reports name this source (``SourceProgress.description``)."""
    patterns = [t for t in options.topics if t.startswith("^")]
    if patterns:
        return f"KafkaV2[SubscribePattern[{'|'.join(f'(?:{p[1:]})' for p in patterns)}]]"
    return f"KafkaV2[Subscribe[{','.join(options.topics)}]]"


def group_offsets(description: str, progress_sources: list[Any]) -> dict[tuple[str, int], int]:
    """``{(topic, partition): end offset}`` of the source named ``description`` in a
    progress report's sources; empty when it is not there."""
    for source in progress_sources:
        if source.description == description and source.endOffset:
            doc = json.loads(source.endOffset)
            return {(t, int(p)): int(o) for t, parts in doc.items() for p, o in parts.items()}
    return {}


class GroupCommitter:
    """Commits a query's Kafka end offsets to the consumer group after each micro-batch.

    Spark reports a micro-batch's progress once its commit is logged, so the group never
    gets ahead of what the checkpoint has committed.  Bound to the first query that reports
    this source (a session may run others)."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.description = source_description(options)
        self.query_id: str | None = None
        self.committed: dict[tuple[str, int], int] = {}
        self._consumer: Any = None

    def on_progress(self, progress: Any) -> None:
        offsets = group_offsets(self.description, list(progress.sources))
        if not offsets:
            return
        if self.query_id is None:
            self.query_id = str(progress.id)
        if str(progress.id) != self.query_id or offsets == self.committed:
            return
        from confluent_kafka import KafkaException, TopicPartition

        try:
            if self._consumer is None:
                self._consumer = _group_consumer(self.options)
            parts = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
            self._consumer.commit(offsets=parts, asynchronous=False)
            self.committed = offsets
        except KafkaException as exc:  # a member of the group is active, the broker is away...
            log.warning("group %s: the offsets of micro-batch %s not committed: %s", self.options.group,
                        progress.batchId, exc)  # fmt: skip

    def listener(self) -> Any:
        from etlstage.sparkapi import progress_listener

        return progress_listener(self.on_progress)


def native_source(spark: SparkSession, ctx: NativeContext) -> DataFrame:
    """The stage as a streaming DataFrame of one column ``value: binary`` (one message per row)."""
    options = options_from(ctx)
    start = None
    if not any(t.startswith("^") for t in options.topics):
        from confluent_kafka import KafkaException

        consumer = _group_consumer(options)
        try:
            start = starting_offsets(options, consumer)
        except ConfigError as exc:
            raise ConfigError(exc.problems, ctx.where) from None
        except KafkaException as exc:  # the broker unreachable, no access...
            raise ConfigError([f"where the query starts, from {options.bootstrap}: {exc}"], ctx.where) from None
        finally:
            consumer.close()
    spark.streams.addListener(GroupCommitter(options).listener())
    log.info("%s: Spark's Kafka source, group %s, new query from %s", ctx.where, options.group, start or options.start)
    markers = ctx.stage.markers
    rows = spark.readStream.format("kafka").options(**reader_options(options, start)).load()
    return rows.mapInArrow(lambda batches: frame_batches(batches, markers, options), "value binary")


native_source.spark_conf = spark_conf  # type: ignore[attr-defined]
native_source.has_new = has_new  # type: ignore[attr-defined]

__all__ = ["has_new", "native_source", "options_from", "reader_options", "starting_offsets"]
