"""L batch ids under the Spark engine: the supervisor's rule (:mod:`etlstage.conversation.batchid`)
with a Spark task's place.

A task's place is its micro-batch (Spark's batch id, logged with its offsets before the
batch runs, so a replayed micro-batch has the one it had) and its partition; a batch's
place in it is how many of the task's messages came before the batch. A task retried,
or a micro-batch run again over the same partitions, cuts the same batches at the same
places and gives them the ids they had. Spark does not promise the same partitions on a
replay (SPARK-28650): a batch cut otherwise holds other messages, so its content gives
it another id — it is loaded again, never skipped for data it does not have.
"""

from __future__ import annotations

from etlstage.conversation.batchid import batch_id


def task_source() -> str:
    """This task's micro-batch (``micro-batch N``), or its Spark stage outside a stream."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return "spark"
    micro = ctx.getLocalProperty("streaming.sql.batchId")
    return f"micro-batch {micro}" if micro is not None else f"spark stage {ctx.stageId()}"


class TaskIds:
    """The ids of one task's batches for one L-stage, in the order they are cut."""

    def __init__(self, pipeline: str, stage: str, partition: int, source: str) -> None:
        self.pipeline, self.stage, self.partition, self.source = pipeline, stage, partition, source
        self.taken = 0  # the task's messages in batches cut so far

    def take(self, messages: int) -> int:
        """The place of the next batch of ``messages`` messages."""
        before = self.taken
        self.taken += messages
        return before

    def ident(self, offset: int, block: bytes) -> str:
        return batch_id(self.pipeline, self.stage, self.partition, [(self.source, 0, offset)], block)


__all__ = ["TaskIds", "task_source"]
