"""L-stages as a Python streaming writer: a task's EOPs are its acknowledgement.

``write`` runs in each task and returns only after the L worker answered every message
of the partition with EOP (every L-stage, in turn, for several); Spark logs the
micro-batch's commit only after every task returned, so a batch is committed exactly
when every message of it was acknowledged.  A batch replayed after a crash reaches the
worker again: at-least-once, as under the supervisor; idempotent sinks absorb replays.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

from etlstage.protocol.markers import Markers
from etlstage.spark.plan import Plan
from etlstage.spark.transform import input_blocks, partition_id

log = logging.getLogger("etlstage.spark.sink")


class LoadSink(DataSource):
    """``df.writeStream.format("etlstage-load").option("plan", …).option("markers", …)``."""

    @classmethod
    def name(cls) -> str:
        return "etlstage-load"

    def schema(self) -> str:
        return "value binary"

    def streamWriter(self, schema: object, overwrite: bool) -> LoadWriter:
        plan = Plan.decode(self.options["plan"])
        eom, eop, eob, bnc = (int(x) for x in self.options["markers"].split(","))
        return LoadWriter(plan, Markers(eom, eop, eob, bnc))


@dataclass
class Loaded(WriterCommitMessage):
    partition: int
    messages: int


class LoadWriter(DataSourceStreamArrowWriter):
    def __init__(self, plan: Plan, source: Markers) -> None:
        self.plan = plan
        self.source = source

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Loaded:
        partition = partition_id()
        loads = [s for s in self.plan.config.stages if s.type == "L"]
        workers = [self.plan.worker(s, partition) for s in loads]
        messages = 0
        if len(workers) == 1:
            stage = loads[0]
            counted = _Counter(input_blocks(iterator, self.source, stage), stage.markers.eom)
            for _ in workers[0].transform(counted):
                pass
            messages = counted.total
        else:  # every L-stage receives every message: block by block, each in turn
            for batch in iterator:
                messages += batch.num_rows
                for stage, worker in zip(loads, workers, strict=True):
                    for _ in worker.transform(input_blocks(iter([batch]), self.source, stage)):
                        pass
        return Loaded(partition, messages)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.debug("micro-batch %d acknowledged by %d task(s)", batchId, len(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("micro-batch %d not committed: a load task failed; it will be replayed", batchId)


class _Counter:
    """Blocks passed through, their messages counted."""

    def __init__(self, blocks: Iterator[bytes], eom: int) -> None:
        self.blocks = blocks
        self.eom = bytes([eom])
        self.total = 0

    def __iter__(self) -> Iterator[bytes]:
        for block in self.blocks:
            self.total += block.count(self.eom)
            yield block


__all__ = ["LoadSink"]
