"""L-stages as a Python streaming writer: a task's EOPs are its acknowledgement.

``write`` runs in each task and returns only after the L worker answered every message
of the partition with EOP (every L-stage, in turn, for several); Spark logs the
micro-batch's commit only after every task returned, so a batch is committed exactly
when every message of it was acknowledged.  A batch replayed after a crash reaches the
worker again: at-least-once, as under the supervisor; idempotent sinks absorb replays.

T-stages that keep the partitioning of their input (same ``instances``, no
``partition_by``) run *in* the writer's task, worker after worker, instead of as
separate ``mapInArrow`` steps: their messages never cross into the JVM and back.  Their
counts come back in the commit messages and are written under the checkpoint by batch
id for the progress display.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

from etlstage.config.model import StageConfig
from etlstage.protocol.markers import Markers
from etlstage.spark.checkpoint import own_path, owner_only, private_folder
from etlstage.spark.tasks.blocks import count_messages, to_block
from etlstage.spark.tasks.plan import Plan
from etlstage.spark.tasks.prefetch import burst_room
from etlstage.spark.tasks.transform import framed_for, partition_id

log = logging.getLogger("etlstage.spark.sink")


class LoadSink(DataSource):
    """``df.writeStream.format("etlstage-load").option("plan", …).option("markers", …).option("chain", …)``."""

    @classmethod
    def name(cls) -> str:
        return "etlstage-load"

    def schema(self) -> str:
        return "value binary"

    def streamWriter(self, schema: object, overwrite: bool) -> LoadWriter:
        plan = Plan.decode(self.options["plan"])
        chain = [n for n in self.options.get("chain", "").split(",") if n]
        markers = Markers.from_option(self.options["markers"])
        return LoadWriter(plan, markers, chain, self.options.get("handoff") or None)


@dataclass
class Loaded(WriterCommitMessage):
    partition: int
    messages: int  # reached the L-stages
    outputs: dict[str, int] = field(default_factory=dict)  # results of the T-stages run in this task
    sizes: dict[str, int] = field(default_factory=dict)  # their bytes, each message with its EOM


class LoadWriter(DataSourceStreamArrowWriter):
    def __init__(
        self, plan: Plan, source: Markers, chain: list[str], handoff: str | None = None, loads: list[str] | None = None
    ) -> None:
        self.plan = plan
        self.source = source
        self.chain = chain
        self.handoff = handoff  # the extractor whose spool files arrive as rows (their names)
        self.loads = loads  # the L-stages that load (None: all; a replayed dead letter: its own)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Loaded:
        with contextlib.ExitStack() as using:
            return self._write(iterator, using)

    def _write(self, iterator: Iterator[pa.RecordBatch], using: contextlib.ExitStack) -> Loaded:
        partition = partition_id()
        config = self.plan.config
        markers = self.source
        blocks: Iterable[bytes] = (to_block(batch.column(0)) for batch in iterator)
        counters: list[tuple[str, _Counter]] = []
        if self.handoff:
            from etlstage.spark.tasks.spool import spool_blocks

            names = (n.decode() for batch in iterator for n in batch.column(0).to_pylist())
            eom = markers.eom  # bound now: the generator runs after `markers` moves on down the chain
            line, source = self.plan.reach(), self.handoff
            extracted = _Counter((b for n in names for b in spool_blocks(line.read(source, n), eom, n)), eom)
            counters.append((self.handoff, extracted))
            blocks = extracted
        # each stage's input pulled in a thread of its own (tasks/prefetch.py) when the task's
        # input is the spool, read here: Spark's own iterator is read in this thread only
        # with room for two of the upstream's bursts of confirmed results, so that it goes
        # back to its own worker at once instead of taking turns with this stage
        ahead = bool(self.handoff)
        upstream: StageConfig | None = None
        for name in self.chain:
            stage = config.stage(name)
            worker = using.enter_context(self.plan.use(stage, partition))
            room = burst_room((upstream or stage).replay_bytes)
            results = worker.transform(framed_for(self.plan, blocks, markers, stage), ahead=ahead, ahead_bytes=room)
            counter = _Counter(results, stage.markers.eom)
            counters.append((name, counter))
            blocks, markers, upstream = counter, stage.markers, stage
        loads = [s for s in config.stages if s.type == "L" and (self.loads is None or s.name in self.loads)]
        workers = [using.enter_context(self.plan.use(s, partition)) for s in loads]
        # the last stage's results, already counted (or the extractor's spool): not counted twice
        loaded = blocks if isinstance(blocks, _Counter) else _Counter(blocks, markers.eom)
        if len(workers) == 1:
            room = burst_room((upstream or loads[0]).replay_bytes)
            framed = framed_for(self.plan, loaded, markers, loads[0])
            for _ in workers[0].transform(framed, ahead=ahead, ahead_bytes=room):
                pass
        else:  # every L-stage receives every message: block by block, each in turn
            for block in loaded:
                for stage, worker in zip(loads, workers, strict=True):
                    for _ in worker.transform(framed_for(self.plan, [block], markers, stage)):
                        pass
        return Loaded(
            partition, loaded.total, {name: c.total for name, c in counters}, {name: c.bytes for name, c in counters}
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        totals: dict[str, int] = {}
        sizes: dict[str, int] = {}
        for m in messages:
            if isinstance(m, Loaded):
                for name, n in m.outputs.items():
                    totals[name] = totals.get(name, 0) + n
                for name, n in m.sizes.items():
                    sizes[name] = sizes.get(name, 0) + n
        if totals:
            path = own_path(self.plan.config, "batch-counts", f"{batchId}.json")  # commit runs on the driver
            private_folder(path.parent)
            tmp = path.with_suffix(".tmp")
            with open(tmp, "w", opener=owner_only) as f:
                f.write(json.dumps({"messages": totals, "bytes": sizes}))
            os.replace(tmp, path)
        log.debug("micro-batch %d acknowledged by %d task(s)", batchId, len(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("micro-batch %d not committed: a load task failed; it will be replayed", batchId)


class _Counter:
    """Blocks passed through, their messages counted."""

    def __init__(self, blocks: Iterable[bytes], eom: int) -> None:
        self.blocks = blocks
        self.eom = eom
        self.total = 0
        self.bytes = 0

    def __iter__(self) -> Iterator[bytes]:
        for block in self.blocks:
            self.total += count_messages(block, self.eom)
            self.bytes += len(block)
            yield block


__all__ = ["LoadSink", "LoadWriter"]
