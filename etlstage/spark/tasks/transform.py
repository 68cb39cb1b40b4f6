"""T-stages as ``mapInArrow`` tasks, and the partitioning in front of every T and L stage.

Each task drives its partition's worker (one process per stage and partition in the
executor's Python process, kept across micro-batches) over the marker protocol.
``partition_by`` hashes each message's JSON-pointer value exactly as the supervisor
does (CRC-32 of the canonical JSON, modulo ``instances``), so a key stays on one
partition in every batch and under either engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from etlstage.config.model import StageConfig
from etlstage.protocol.markers import Markers
from etlstage.spark.tasks.admission import admitted
from etlstage.spark.tasks.blocks import SCHEMA, message_ends, spans, to_batches, to_block
from etlstage.spark.tasks.plan import Plan

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

ArrowFn = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def partition_id() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


def framed_for(plan: Plan, blocks: Iterable[bytes], source: Markers, stage: StageConfig) -> Iterator[bytes]:
    """Blocks framed with ``source`` markers, as ``stage`` may take them: re-framed for its
    markers, and what it refuses handled by its ``on_failure`` (:mod:`etlstage.spark.tasks.admission`)."""
    return admitted(blocks, source, stage, plan.refuse, partition_id())


def transform_task(plan: Plan, stage_name: str, source: Markers) -> ArrowFn:
    """The function ``mapInArrow`` runs for a T-stage."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        stage = plan.config.stage(stage_name)
        with plan.use(stage, partition_id()) as worker:
            blocks = framed_for(plan, (to_block(batch.column(0)) for batch in batches), source, stage)
            for block in worker.transform(blocks):
                yield from to_batches(block, stage.markers.eom)

    return run


def reframe_task(plan: Plan, source: Markers, stage_name: str) -> ArrowFn:
    """Rows framed with ``source`` markers, as the first stage after the extractors may take
    them (a union of extractors with different markers)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        stage = plan.config.stage(stage_name)
        for block in framed_for(plan, (to_block(batch.column(0)) for batch in batches), source, stage):
            yield from to_batches(block, stage.markers.eom)

    return run


KEYED_SCHEMA = "value binary, pid int"


def key_task(stage: StageConfig, source: Markers) -> ArrowFn:
    """Rows with the partition (``pid``) their ``partition_by`` key belongs to."""
    from etlstage.protocol.partition import parse_pointer, partition_key, partition_of  # the supervisor's rule

    tokens = parse_pointer(stage.partition_by or "")
    eom_len = 1

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            block = to_block(batch.column(0))
            if not block:
                continue
            ids = [
                partition_of(partition_key(block[s : e - eom_len], tokens), stage.instances)
                for s, e in spans(message_ends(block, source.eom))
            ]
            pids = pa.array(np.asarray(ids, dtype=np.int32))
            yield pa.RecordBatch.from_arrays([batch.column(0), pids], names=["value", "pid"])

    return run


def place(df: DataFrame, parts: int, stage: StageConfig, source: Markers) -> tuple[DataFrame, int]:
    """``df`` (``parts`` partitions, messages framed with ``source`` markers) on the stage's
    ``instances`` partitions: by each message's key under ``partition_by``."""
    n = stage.instances
    if stage.keyed and n > 1:
        keyed = df.mapInArrow(key_task(stage, source), KEYED_SCHEMA)
        return keyed.repartitionById(n, "pid").select("value"), n
    if parts == n:
        return df, n
    # Never coalesce: Spark would run the upstream step's partitions inside fewer tasks,
    # and a T-stage's worker for partition 1 would never start (its messages going to
    # partition 0's, whose keyed state is not theirs).  A shuffle keeps them apart.
    return df.repartition(n), n


__all__ = [
    "KEYED_SCHEMA",
    "SCHEMA",
    "framed_for",
    "key_task",
    "partition_id",
    "place",
    "reframe_task",
    "transform_task",
]
