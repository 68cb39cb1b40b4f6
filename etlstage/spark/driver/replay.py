"""Dead letters marked by `etlstage deadletter replay`, sent again under the Spark engine.

Before the query starts, a batch job per stage takes its marked dead letters
(:func:`etlstage.kit.replays.marked_for_replay`, the supervisor's choice) through
that stage and every later one, placed on their partitions exactly as the query places
messages (by key under ``partition_by``), and loads them with the same tasks as the
sink.  Once the job has succeeded they are marked ``replayed``; if it fails, they stay
``replay`` and the run fails (the next run tries again).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from etlstage.kit.replays import Replay, marked_for_replay
from etlstage.spark.tasks.plan import Plan
from etlstage.state.store import StateStore

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from etlstage.protocol.markers import Markers
    from etlstage.spark.tasks.transform import ArrowFn

log = logging.getLogger("etlstage.spark")


def replay_deadletters(spark: SparkSession, plan: Plan) -> None:
    from etlstage.spark.driver.native import natives

    config = plan.config
    store = StateStore(config.state_dir)
    try:
        todo = marked_for_replay(store, config.stages)
        if not todo:
            return
        native = natives(plan)
        if any(s.name in native for s in config.stages if s.type == "L"):
            log.warning(
                "%d dead letter(s) marked for replay are left as they are: the Spark engine replays "
                "them through worker programs, and this pipeline's L-stage runs natively",
                len(todo),
            )
            return
        for stage in config.stages:  # in the pipeline's order
            group = [r for r in todo if r.stage.name == stage.name]
            if group:
                _replay(spark, plan, group)
                store.set_deadletter_status([r.deadletter.id for r in group], "replayed")
                for r in group:
                    log.info(
                        "dead letter #%d: %d message(s) sent again to stage %r", r.deadletter.id, r.count, stage.name
                    )
    finally:
        store.close()


def _replay(spark: SparkSession, plan: Plan, group: list[Replay]) -> None:
    from etlstage.spark.tasks.blocks import message_ends, spans
    from etlstage.spark.tasks.transform import place, transform_task

    config = plan.config
    stage = group[0].stage
    rows = [(r.block[s:e],) for r in group for s, e in spans(message_ends(r.block, stage.markers.eom))]
    df: DataFrame = spark.createDataFrame(rows, "value binary")
    markers = stage.markers
    transforms = [s for s in config.stages if s.type == "T"]
    if stage.type == "T":
        for t in transforms[[s.name for s in transforms].index(stage.name) :]:
            df, _ = place(df, 0, t, markers)
            df = df.mapInArrow(transform_task(plan, t.name, markers), "value binary")
            markers = t.markers
        loads = None  # on through the pipeline: every L-stage
    else:
        loads = [stage.name]  # an L-stage's own dead letter: that stage alone
    df, _ = place(df, 0, next(s for s in config.stages if s.type == "L"), markers)
    df.mapInArrow(_load_task(plan, markers, loads), "value binary").collect()


def _load_task(plan: Plan, source: Markers, loads: list[str] | None) -> ArrowFn:
    """The sink's load, as a task of a batch job: returns once the L-workers acknowledged."""
    from etlstage.spark.tasks.sink import LoadWriter

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        LoadWriter(plan, source, [], None, loads).write(batches)
        return iter(())

    return run


__all__ = ["replay_deadletters"]
