"""What every Spark task of a run needs to know, pickled once: the pipeline and where things live.

Tasks find their stage's worker through :meth:`Plan.worker`: one process per (run,
stage, partition) in each Python process, reused across micro-batches.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import logging
import pickle
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

from etlstage.config.model import PipelineConfig, StageConfig
from etlstage.errors import PipelineError
from etlstage.kit.transport import worker_env
from etlstage.spark.checkpoint import engine_dir, own_path
from etlstage.spark.driver_line import LineAddress
from etlstage.spark.setup.shipping import Shipped, localize
from etlstage.spark.tasks.conversation import StageWorker, TaskJob
from etlstage.spark.tasks.extract import ExtractWorker
from etlstage.spark.tasks.ownership import Ownership
from etlstage.spark.tasks.pool import REGISTRY
from etlstage.spark.tasks.process import WATCHDOG_GRACE
from etlstage.spark.tasks.tally import Tally, owner_name

if TYPE_CHECKING:
    from etlstage.state.store import StateStore

_TALLIES: dict[tuple[str, str, int], Tally] = {}  # this Python process's, by (run, stage, partition)

log = logging.getLogger("etlstage.spark")


@dataclass(frozen=True)
class Plan:
    config: PipelineConfig
    once: bool = False
    extra_env: dict[str, str] = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    shipped: Shipped = ()  # engine.ship as added to the context: (path here, name of the copy)
    driver_line: LineAddress | None = None  # the driver's, while the query runs (tasks reach the driver there)

    def encode(self) -> str:
        return base64.b64encode(pickle.dumps(self)).decode()

    @staticmethod
    def decode(text: str) -> Plan:
        plan = pickle.loads(base64.b64decode(text))
        assert isinstance(plan, Plan)
        return plan

    # --- places ------------------------------------------------------------------------------

    @property
    def checkpoint(self) -> Path:
        """Spark's checkpoint as a local path (meaningful only when :func:`is_local`)."""
        return Path(self.config.engine.checkpoint)

    @property
    def engine_dir(self) -> Path:
        """The driver's folder for the engine's own files (never opened by a task)."""
        return engine_dir(self.config)

    def spool_dir(self, stage: StageConfig) -> Path:
        """Driver-side extractors' output by batch; tasks read it through the driver line."""
        return own_path(self.config, "spool", stage.name)

    def counts_dir(self, stage: StageConfig) -> Path:
        return own_path(self.config, "counts", stage.name)

    def stage_dir(self, stage: StageConfig, partition: int) -> str:
        """The worker's ETLSTAGE_STATE_DIR: the supervisor's for one instance, one per partition for more."""
        from etlstage.state.store import ensure_private_dir

        base = Path(self.config.state_dir) / "stages" / stage.name
        path = base if stage.instances == 1 else base / f"partition-{partition}"
        return str(ensure_private_dir(path))

    def reach(self) -> LineAddress:
        """The driver line, as a task reaches it."""
        if self.driver_line is None:
            raise PipelineError("this plan has no driver line: its query was not started by run_in")
        return self.driver_line

    # --- workers -------------------------------------------------------------------------------

    def worker(self, stage: StageConfig, partition: int) -> StageWorker:
        """This Python process's worker for (stage, partition), started on first use.

        For a stage with ``partition_by`` (state kept per key) and for a loader
        (:func:`one_live_worker`), taking the partition over from another Python process on
        this host takes its worker over, or waits until that one has stopped it
        (:mod:`etlstage.spark.tasks.ownership`); other stages may have an idle worker per Python
        process.
        """
        REGISTRY.keep_only(self.run_id)
        for old in [k for k in _TALLIES if k[0] != self.run_id]:
            del _TALLIES[old]
        key = (self.run_id, stage.name, partition)
        found = REGISTRY.get(key)
        if isinstance(found, StageWorker):
            return found
        label = stage.label(partition)
        ownership = None
        if one_live_worker(stage):
            ownership = Ownership(self.run_id, stage.name, partition)
            ownership.acquire(stage.stop_timeout + 5.0 + WATCHDOG_GRACE + 5.0, label)
        scenario = stage.scenario(partition, self.stage_dir(stage, partition))
        cwd = stage.cwd or self.config.base_dir
        kind = ExtractWorker if stage.type == "E" else StageWorker
        w = kind(stage, scenario, worker_env(stage, scenario, self.extra_env), cwd, label)
        w.argv, w.cwd = localize(w.argv, cwd, self.config.base_dir, self.shipped)
        w.ownership = ownership
        w.deadletter = self.deadletter
        w.pipeline = self.config.name or ""
        # one tally per (stage, partition) in this process, kept when the worker moves away and back:
        # its file holds everything this process did for the partition in the run
        w.tally = _TALLIES.setdefault(key, Tally(stage.name, partition))
        w.report = functools.partial(self.record, w)
        REGISTRY.put(key, w)
        return w

    def extractor(self, stage: StageConfig, partition: int) -> ExtractWorker:
        w = self.worker(stage, partition)
        assert isinstance(w, ExtractWorker), f"stage {stage.name!r} is not an E-stage"
        return w

    @contextlib.contextmanager
    def use(self, stage: StageConfig, partition: int) -> Iterator[StageWorker]:
        """The worker for a task, kept from being handed over while the task runs."""
        key = (self.run_id, stage.name, partition)
        while True:
            w = self.worker(stage, partition)
            w.in_use.acquire()
            if REGISTRY.get(key) is w:
                break
            w.in_use.release()  # handed over meanwhile: take it again
        try:
            yield w
        finally:
            self.record(w)
            w.in_use.release()

    def record(self, worker: StageWorker) -> None:
        """Publish what ``worker`` did so far for the driver (:mod:`etlstage.spark.tasks.tally`); never fails a task."""
        if self.driver_line is not None:
            with contextlib.suppress(PipelineError):
                self.driver_line.call("tally", {"owner": owner_name(worker.tally)}, worker.tally.to_json().encode())

    def refuse(self, stage: StageConfig, refused: list[tuple[bytes, str]], where: str) -> None:
        """Messages ``stage`` cannot take (a marker of its own inside, over its size limit):
        dead letters in the driver's state, or the error that fails the task and stops the query."""
        from etlstage.kit.admit import refuse

        refuse(cast("StateStore", DriverStore(self.driver_line)), stage, refused, where)

    def deadletter(self, stage: StageConfig, job: TaskJob, error: str) -> None:
        store = DriverStore(self.driver_line)
        store.set_aside(stage.name, job.attempts, error, job.block, job.messages, stage.markers.eom)


def one_live_worker(stage: StageConfig) -> bool:
    """Never two live workers for one partition of ``stage`` on a host (the worker moves
    between Spark's Python processes instead, :mod:`etlstage.spark.tasks.ownership`): a stage with
    keyed state, and every loader — what it holds is one per instance, as under the
    supervisor (a Kafka transactional id: two alive fence each other's transactions; a file
    lock; a database session)."""
    return stage.keyed or stage.type == "L"


ERROR_CHARS = 64 << 10  # of a dead letter's error: JSON-escaped, well within the driver line's MAX_HEADER


@dataclass(frozen=True)
class DriverStore:
    """The dead-letter part of the pipeline's state, in the driver's ``state_dir``, as a task
    reaches it: each call returns once the driver has written it."""

    driver_line: LineAddress | None

    def add_deadletter(self, stage: str, attempts: int, error: str, inputs: bytes, messages: int, eom: int) -> int:
        return self._put(False, stage, attempts, error, inputs, messages, eom)

    def set_aside(self, stage: str, attempts: int, error: str, inputs: bytes, messages: int, eom: int) -> int:
        return self._put(True, stage, attempts, error, inputs, messages, eom)

    def _put(self, logged: bool, stage: str, attempts: int, error: str, inputs: bytes, messages: int, eom: int) -> int:
        if self.driver_line is None:
            raise PipelineError(f"stage {stage!r}: a dead letter, and no driver line to send it to (not run_in)")
        error = error if len(error) <= ERROR_CHARS else error[:ERROR_CHARS] + " …(cut)"  # the driver line's MAX_HEADER
        header = {"stage": stage, "attempts": attempts, "error": error, "messages": messages, "eom": eom}
        answer, _ = self.driver_line.call("deadletter", {**header, "log": logged}, inputs)
        return int(answer["id"])


__all__ = ["DriverStore", "Plan"]
