"""The pipeline as one Spark Structured Streaming query, built from its :mod:`layout`.

E-stages are sources (:mod:`etlstage.spark.tasks.source`), unioned; each T-stage is a
``mapInArrow`` over the binary ``value`` column (:mod:`etlstage.spark.tasks.transform`) on
``instances`` partitions; the L-stages are the sink (:mod:`etlstage.spark.tasks.sink`).
Spark's checkpoint holds the offsets and commits: a micro-batch is a window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from etlstage.config.model import PipelineConfig, StageConfig
from etlstage.protocol.markers import Markers
from etlstage.spark.driver.layout import Layout, layout
from etlstage.spark.driver.report import Counts

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from etlstage.spark.tasks.plan import Plan


def build(spark: SparkSession, plan: Plan) -> Any:
    """The query's DataStreamWriter, ready to start."""
    from etlstage.spark.driver.native import natives

    native = natives(plan)
    lay = layout(plan.config, set(native))
    encoded = plan.encode()
    df, parts = _sources(spark, plan, encoded, lay, native)
    markers = lay.markers
    for t in lay.transforms[: len(lay.transforms) - len(lay.fused)]:
        df, parts, markers = _transform(df, parts, plan, t, markers)
    native_sink = native.get(lay.load.name)
    if native_sink is not None:
        from etlstage.spark.driver.native import context_for

        if not lay.bare:  # the sink takes messages without their EOM
            from pyspark.sql import functions as F

            df = df.select(F.expr("substring(value, 1, length(value) - 1)").alias("value"))
        df = _observed(df, lay.load)
        writer = native_sink(df, context_for(lay.load, plan, spark))
        return _started_by_engine(writer.option("checkpointLocation", plan.config.engine.checkpoint), plan)
    return _started_by_engine(_sink(df, parts, plan.config, encoded, lay, markers), plan)


def _observed(df: DataFrame, stage: StageConfig) -> DataFrame:
    """``df`` counted (rows, bytes) for the stage's figures."""
    from pyspark.sql import functions as F

    return df.observe(Counts.metric(stage), F.count(F.lit(1)).alias("rows"), F.sum(F.length("value")).alias("bytes"))


def _sources(
    spark: SparkSession, plan: Plan, encoded: str, lay: Layout, native: dict[str, Any]
) -> tuple[DataFrame, int]:
    """Every extractor's messages, unioned, framed with ``lay.markers``; and their partitions."""
    from etlstage.spark.driver.native import context_for, frame_task
    from etlstage.spark.tasks.transform import reframe_task

    frames: list[tuple[DataFrame, int]] = []
    for e in lay.extractors:
        if e.name in native:
            df = _observed(native[e.name](spark, context_for(e, plan, spark)), e)
            if not lay.bare:  # rows become messages framed for their consumer
                df = df.mapInArrow(frame_task(plan, lay.consumer.name, lay.markers.eom), "value binary")
            frames.append((df, 0))  # its partitions are the source's own: placed anew below
            continue
        df = (
            spark.readStream.format("etlstage-extract")
            .option("plan", encoded)
            .option("stage", e.name)
            .option("partitions", str(lay.spool_partitions))
            .option("handoff", "1" if lay.handoff else "")
            .load()
        )
        if not lay.handoff:  # with the handoff, the sink's tasks count the extracted messages
            df = _observed(df, e)
        if e.markers != lay.markers:
            df = df.mapInArrow(reframe_task(plan, e.markers, lay.consumer.name), "value binary")
        frames.append((df, lay.source_parts(e)))
    df, parts = frames[0]
    for other, n in frames[1:]:
        df, parts = df.unionAll(other), parts + n
    return df, parts


def _transform(
    df: DataFrame, parts: int, plan: Plan, t: StageConfig, markers: Markers
) -> tuple[DataFrame, int, Markers]:
    """A T-stage on its own partitions: its output, their number, its markers."""
    from etlstage.spark.tasks.transform import place, transform_task

    df, parts = place(df, parts, t, markers)
    df = _observed(df.mapInArrow(transform_task(plan, t.name, markers), "value binary"), t)
    return df, parts, t.markers


def _sink(df: DataFrame, parts: int, config: PipelineConfig, encoded: str, lay: Layout, markers: Markers) -> Any:
    """The workers' sink (the fused T-stages in its tasks), its writer ready to start."""
    from etlstage.spark.tasks.transform import place

    if not lay.fused:
        df, parts = place(df, parts, lay.load, markers)
    return (
        df.writeStream.format("etlstage-load")
        .option("plan", encoded)
        .option("markers", markers.to_option())
        .option("chain", ",".join(t.name for t in lay.fused))
        .option("handoff", lay.extractors[0].name if lay.handoff else "")
        .option("checkpointLocation", config.engine.checkpoint)
    )


def _started_by_engine(writer: Any, plan: Plan) -> Any:
    """The query's name and trigger: the engine's, whoever wrote the sink."""
    writer = writer.queryName(query_name(plan.config))
    if plan.once:
        return writer.trigger(availableNow=True)
    if plan.config.engine.trigger > 0:
        return writer.trigger(processingTime=f"{plan.config.engine.trigger:g} seconds")
    return writer


def query_name(config: PipelineConfig) -> str:
    return "etlstage_" + "".join(c if c.isalnum() else "_" for c in config.name)


__all__ = ["build", "query_name"]
