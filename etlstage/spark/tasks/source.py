"""E-stages as Python streaming data sources: one window = one micro-batch.

*Driver-side* (plain E, cyclic E with worker-managed offsets): the worker runs in the
source's planning process on the driver.  ``latestOffset`` asks it for the next window
— a cycle request, or what a plain worker wrote since — and spools the messages under
the checkpoint, fsync'd, before Spark logs the batch's offsets; the tasks read the
spool, and a batch replayed after a driver crash reads the same bytes.  Spark plans
batch N+1 only after batch N's commit is logged, so a cycle request is never sent
before the previous window was committed: a worker that receives a request may commit
its previous cycle, exactly as under the supervisor.

*Executor-side* (cyclic E with supervisor-managed offsets): ``latestOffset`` asks the
stage's offset policy for the next window; each of the ``instances`` input partitions
runs the E worker in its task with ``{"start": S, "end": E}``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from etlstage.config.model import StageConfig
from etlstage.errors import PipelineError, WorkerError
from etlstage.spark.tasks.blocks import message_ends, to_batches
from etlstage.spark.tasks.extract import ExtractWorker
from etlstage.spark.tasks.plan import Plan
from etlstage.spark.tasks.readahead import ReadAhead
from etlstage.spark.tasks.spool import spool_blocks, write_window

log = logging.getLogger("etlstage.spark.source")

PLAIN_BATCH_BYTES = 256 << 20  # a plain worker's output is cut into micro-batches of at most about this size
PLAIN_LINGER = 2.0  # ...or what it wrote within this long after the first bytes (sooner when a batch waits)


class ExtractSource(DataSource):
    """``spark.readStream.format("etlstage-extract").option("plan", …).option("stage", name)``."""

    @classmethod
    def name(cls) -> str:
        return "etlstage-extract"

    def schema(self) -> str:
        return "value binary"

    def streamReader(self, schema: object) -> DataSourceStreamReader:
        plan = Plan.decode(self.options["plan"])
        stage = plan.config.stage(self.options["stage"])
        partitions = int(self.options.get("partitions", "1"))
        if stage.mode == "cyclic" and stage.offsets == "supervisor":
            return PolicyReader(plan, stage)
        return DriverReader(plan, stage, partitions, handoff=bool(self.options.get("handoff")))


class SpoolPartition(InputPartition):
    """Spool files by name (in the driver's spool of ``stage``, read through the driver line)."""

    def __init__(self, stage: str, files: list[str], eom: int) -> None:
        super().__init__(files)
        self.stage = stage
        self.files = files
        self.eom = eom


class WindowPartition(InputPartition):
    def __init__(self, instance: int, request: dict[str, object]) -> None:
        super().__init__(instance)
        self.instance = instance
        self.request = request


class DriverReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plain E and cyclic E with worker-managed offsets; offsets are ``{"seq": windows}``."""

    def __init__(self, plan: Plan, stage: StageConfig, partitions: int, handoff: bool = False) -> None:
        self.plan = plan
        self.handoff = handoff  # rows are the spool files' paths: the sink's tasks read them
        self.stage = stage
        self.partitions_per_batch = max(1, partitions)
        self.spool = plan.spool_dir(stage)
        self.worker: ExtractWorker | None = None
        self.finished = False  # plain: the worker exited; cyclic --once: an empty cycle came
        self.answered: tuple[int, int] | None = None  # (start seq, end seq) already extracted
        self.next_poll = 0.0
        self.ahead: ReadAhead | None = None  # a plain worker's next window, read while batches run

    def initialOffset(self) -> dict:
        return {"seq": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        """--once: windows until the extractor has nothing more (see :meth:`latestOffset`)."""

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        seq = int(start["seq"])
        if self.answered is not None and self.answered[0] == seq:
            return {"seq": self.answered[1]}  # asked again for the same batch: same answer
        if self.finished or time.monotonic() < self.next_poll:
            return start
        worker = self._worker()
        try:
            if self.stage.mode == "plain":  # read ahead while batches run: spooled already
                if not self._read_ahead(worker).take(seq):
                    self.finished = True
                    return start
                self.answered = (seq, seq + 1)
                return {"seq": seq + 1}
            block = worker.cycle(b"")
            if not block:  # an empty cycle: --once is over; otherwise ask again after poll_interval
                self.finished = self.plan.once
                self.next_poll = time.monotonic() + self.stage.poll_interval
        finally:
            self.plan.record(worker)
        if not block:
            return start
        write_window(self.spool, str(seq), [block], self.stage.markers.eom, self.partitions_per_batch)
        self.answered = (seq, seq + 1)
        return {"seq": seq + 1}

    def _read_ahead(self, worker: ExtractWorker) -> ReadAhead:
        if self.ahead is None:
            self.ahead = ReadAhead(worker, self.spool, self.partitions_per_batch, PLAIN_BATCH_BYTES, PLAIN_LINGER)
        return self.ahead

    def _worker(self) -> ExtractWorker:
        if self.worker is None:
            self.worker = self.plan.extractor(self.stage, 0)
        return self.worker

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        first, stop = int(start["seq"]), int(end["seq"])
        if first == stop:
            return []
        eom = self.stage.markers.eom
        names = [[f"{s}-{p}.bin" for s in range(first, stop)] for p in range(self.partitions_per_batch)]
        return [SpoolPartition(self.stage.name, files, eom) for files in names]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SpoolPartition)
        if self.handoff:
            yield pa.RecordBatch.from_arrays([pa.array([f.encode() for f in partition.files], pa.binary())], ["value"])
            return
        line = self.plan.reach()
        for name in partition.files:
            for block in spool_blocks(line.read(partition.stage, name), partition.eom, name):
                yield from to_batches(block, partition.eom)

    def commit(self, end: dict) -> None:
        """Batches before ``end`` are committed: their spool is no longer needed."""
        stop = int(end["seq"])
        for path in self.spool.glob("*.bin") if self.spool.exists() else ():
            if int(path.name.split("-", 1)[0]) < stop:
                path.unlink(missing_ok=True)

    def stop(self) -> None:
        if self.ahead is not None:
            self.ahead.stop()
        if self.worker is not None:
            self.worker.stop()
            self.worker = None


class PolicyReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Cyclic E with supervisor-managed offsets: offsets are ``{"next": start of the next window}``."""

    def __init__(self, plan: Plan, stage: StageConfig) -> None:
        from etlstage.protocol.offsets import make_policy

        self.plan = plan
        self.stage = stage
        op = stage.offset_policy
        assert op is not None
        self.policy = make_policy(op.kind, op.start, op.step, op.lag, f"stage {stage.name!r}: offset_policy")
        self.counts = plan.counts_dir(stage)
        self.recorded: object = None  # the last end brought into the pipeline's state by this reader

    def initialOffset(self) -> dict:
        """Where the pipeline's committed state says (the last run may have been the supervisor's)."""
        ends = committed_ends(self.plan, self.stage)
        if any(e is None for e in ends):
            return {"next": self.policy.first()}
        # the instances commit together, so their ends agree; were they not to, none skips a window
        return {"next": min(ends, key=self.policy.order)}

    def prepareForTriggerAvailableNow(self) -> None:
        """--once: windows until one comes back empty from every instance."""

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        # asked only once the batch that ended at ``start`` committed; Spark delivers commit()
        # lazily (never for a run's last batch), so the pipeline's state is brought up to it here
        if start["next"] != self.recorded:
            record_committed(self.plan, self.stage, start["next"], self.counts, _safe(start["next"]))
            self.recorded = start["next"]
        if self.plan.once and self._last_was_empty(start["next"]):
            return start
        span = self.policy.window(start["next"])
        if span is None:
            return start
        return {"next": span[1]}

    def _last_was_empty(self, end: object) -> bool:
        """--once ends after a window every instance answered with nothing (as the supervisor does)."""
        found = [self.counts / f"{_safe(end)}-{i}" for i in range(self.stage.instances)]
        if not all(p.exists() for p in found):
            return False
        return sum(int(p.read_text() or 0) for p in found) == 0

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if start == end:
            return []
        request = {"start": start["next"], "end": end["next"]}
        return [WindowPartition(i, request) for i in range(self.stage.instances)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, WindowPartition)
        request = json.dumps(partition.request, separators=(",", ":")).encode()
        with self.plan.use(self.stage, partition.instance) as worker:
            assert isinstance(worker, ExtractWorker)
            try:
                block = worker.cycle(request)
            except WorkerError as exc:
                raise PipelineError(str(exc)) from exc
        n = len(message_ends(block, self.stage.markers.eom))
        name = f"{_safe(partition.request['end'])}-{partition.instance}"
        self.plan.reach().call("count", {"stage": self.stage.name, "name": name, "n": n})  # on the driver
        yield from to_batches(block, self.stage.markers.eom)

    def commit(self, end: dict) -> None:
        """The batch before ``end`` is committed: so is the pipeline's state, for either engine's next run."""
        record_committed(self.plan, self.stage, end["next"], self.counts, _safe(end["next"]))
        for path in self.counts.glob("*") if self.counts.exists() else ():
            if not path.name.startswith(_safe(end["next"]) + "-"):
                path.unlink(missing_ok=True)


def _labels(stage: StageConfig) -> list[str]:
    """The pipeline state's names of the stage's instances (the supervisor's window sources)."""
    return [stage.label(i) for i in range(stage.instances)]


def committed_ends(plan: Plan, stage: StageConfig) -> list[object]:
    """Each instance's last committed end in the pipeline's state (None: nothing committed yet)."""
    from etlstage.state.store import StateStore

    store = StateStore(plan.config.state_dir)
    try:
        return [store.committed(label)[0] for label in _labels(stage)]
    finally:
        store.close()


def record_committed(plan: Plan, stage: StageConfig, end: object, counts: Path, prefix: str) -> None:
    """Window ``[..., end)`` of every instance is committed: written to the pipeline's state as the supervisor does."""
    from etlstage.state.store import StateStore

    if not any((counts / f"{prefix}-{i}").exists() for i in range(stage.instances)):
        return  # no batch of this checkpoint ended there (the first offset): nothing to record
    store = StateStore(plan.config.state_dir)
    try:
        for i, label in enumerate(_labels(stage)):
            counted = counts / f"{prefix}-{i}"
            messages = int(counted.read_text() or 0) if counted.exists() else 0
            committed, done = store.committed(label)
            if committed == end:  # told again about a batch already recorded (a restart)
                continue
            store.commit(label, done, end, messages)
    finally:
        store.close()


def _safe(value: object) -> str:
    return str(value).replace("/", "_").replace(":", "_")


__all__ = ["ExtractSource"]
