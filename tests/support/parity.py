"""One T- or L-stage's conversation through both engines, in this process, for comparison.

:func:`supervisor` drives the worker program with the supervisor's stage driver
(``runtime.driver.TransformDriver``), :func:`spark` with the Spark task's
``spark.conversation.StageWorker`` — no JVM: both are plain Python over the worker's
pipes.  Each returns an :class:`Outcome` of what a user would see: the results, the
dead letters, the restarts with their waits, and the error that stopped the stage.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from etlstage.config.model import StageConfig
from etlstage.errors import PipelineError, WorkerError
from etlstage.kit.stats import StageStats
from etlstage.kit.transport import ProcessTransport, Transport, worker_env
from etlstage.protocol.framing import count_eom, split_block
from etlstage.protocol.scenario import Scenario
from etlstage.runtime.driver import STOP, ExtractDriver, TransformDriver
from etlstage.runtime.flow import Inbox, Job, Piece, Window
from etlstage.runtime.tasks import run_all
from etlstage.spark.tasks.conversation import StageWorker
from etlstage.spark.tasks.extract import ExtractWorker

RESTART = re.compile(r"; (restart.*)$")


@dataclass
class Outcome:
    outputs: list[bytes] = field(default_factory=list)  # results handed on, in order
    deadletters: list[list[bytes]] = field(default_factory=list)  # the messages of each
    restarts: list[str] = field(default_factory=list)  # "restart 1 of at most 2 in a row in 0.0s", ...
    error: str | None = None  # the first line of the error that stopped the stage

    def distinct(self) -> list[bytes]:
        """The results, each once, sorted: what a failure's resends may repeat, an engine may not lose."""
        return sorted(set(self.outputs))


@contextmanager
def _restart_notes(into: list[str]) -> Iterator[None]:
    """Collect the restart lines both engines log (the policy writes them)."""

    class Notes(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            # the policy's line; the supervisor may add the worker's stderr below it
            found = RESTART.search(record.getMessage().splitlines()[0])
            if found:
                into.append(found.group(1))

    handler = Notes(logging.WARNING)
    loggers = [logging.getLogger("etlstage.stage"), logging.getLogger("etlstage.spark.stage")]
    for lg in loggers:
        lg.addHandler(handler)
    try:
        yield
    finally:
        for lg in loggers:
            lg.removeHandler(handler)


def _blocks(stage: StageConfig, inputs: list[list[bytes]]) -> list[bytes]:
    eom = stage.markers.EOM
    return [b"".join(m + eom for m in block) for block in inputs if block]


def supervisor(stage: StageConfig, inputs: list[list[bytes]], state_dir: str) -> Outcome:
    """``inputs``: the messages in blocks (pieces of one window in the stage's inbox)."""
    out = Outcome()
    eom = stage.markers.EOM

    async def spawn(st: StageConfig, scenario: Scenario, label: str) -> Transport:
        env = worker_env(st, scenario)
        return await ProcessTransport.spawn(scenario.expand(st.argv()), env, None, label)

    async def emit(piece: Piece) -> None:
        out.outputs.extend(split_block(piece.block, eom))

    def deadletter(st: StageConfig, job: Job, error: str) -> None:
        out.deadletters.append(split_block(job.block, eom))

    async def run() -> None:
        window = Window("parity", 0, 3)
        inbox = Inbox(eom, 1 << 30)
        stats = StageStats(stage.name, stage.type)
        driver = TransformDriver(stage, 1, state_dir, spawn, stats, [inbox], emit, deadletter)

        async def fill() -> None:
            for block in _blocks(stage, inputs):
                n = count_eom(block, eom)
                window.add(1, n)
                inbox.put_nowait(Piece(block, n, window))
            window.close()
            inbox.close()

        try:
            await run_all(driver.run(), fill())
        finally:
            await driver.abort_all()

    with _restart_notes(out.restarts):
        try:
            asyncio.run(run())
        except PipelineError as exc:
            out.error = str(exc).splitlines()[0]
    return out


def spark(stage: StageConfig, inputs: list[list[bytes]], state_dir: str) -> Outcome:
    """The same through a Spark task's conversation: each block one Arrow batch of its input."""
    out = Outcome()
    eom = stage.markers.EOM
    scenario = stage.scenario(0, state_dir)
    worker = StageWorker(stage, scenario, worker_env(stage, scenario), None, stage.name)
    worker.deadletter = lambda st, job, error: out.deadletters.append(split_block(job.block, eom))
    with _restart_notes(out.restarts):
        try:
            for block in worker.transform(iter(_blocks(stage, inputs))):
                out.outputs.extend(split_block(block, eom))
        except PipelineError as exc:
            out.error = str(exc).splitlines()[0]
        finally:
            worker.stop()
    return out


def supervisor_cycles(stage: StageConfig, requests: list[bytes], state_dir: str) -> tuple[list[list[bytes]], Outcome]:
    """A cyclic E-stage asked ``requests`` in turn by the supervisor: each cycle's messages."""
    out = Outcome()
    eom = stage.markers.EOM
    cycles: list[list[bytes]] = []
    queue = list(requests)

    async def spawn(st: StageConfig, scenario: Scenario, label: str) -> Transport:
        env = worker_env(st, scenario)
        return await ProcessTransport.spawn(scenario.expand(st.argv()), env, None, label)

    def open_window(label: str, request: object) -> Window:
        cycles.append([])
        return Window(label, len(cycles), 2, request)

    async def next_request(label: str) -> object:
        return queue.pop(0) if queue else STOP  # a plain E-stage asks nothing: one window

    async def emit(piece: Piece) -> None:
        cycles[-1].extend(split_block(piece.block, eom))

    async def run() -> None:
        stats = StageStats(stage.name, stage.type)
        driver = ExtractDriver(stage, state_dir, spawn, stats, emit, open_window, next_request, once=False)
        try:
            await driver.run()
        finally:
            await driver.abort_all()

    with _restart_notes(out.restarts):
        try:
            asyncio.run(run())
        except PipelineError as exc:
            out.error = str(exc).splitlines()[0]
    return cycles, out


def spark_plain(stage: StageConfig, state_dir: str) -> tuple[list[list[bytes]], Outcome]:
    """A plain E-stage's whole output, read by the Spark driver (``ExtractWorker.drain_plain``)."""
    out = Outcome()
    scenario = stage.scenario(0, state_dir)
    worker = ExtractWorker(stage, scenario, worker_env(stage, scenario), None, stage.name)
    got: list[bytes] = []
    with _restart_notes(out.restarts):
        try:
            ended = False
            while not ended:
                block, ended = worker.drain_plain(1 << 20, 0.05)
                got.extend(split_block(block, stage.markers.EOM))
        except (PipelineError, WorkerError) as exc:
            out.error = str(exc).splitlines()[0]
        finally:
            worker.stop()
    return [got], out


def spark_cycles(stage: StageConfig, requests: list[bytes], state_dir: str) -> tuple[list[list[bytes]], Outcome]:
    """The same asked by a Spark task (``ExtractWorker.cycle``, as on an executor)."""
    out = Outcome()
    eom = stage.markers.EOM
    scenario = stage.scenario(0, state_dir)
    worker = ExtractWorker(stage, scenario, worker_env(stage, scenario), None, stage.name)
    cycles: list[list[bytes]] = []
    with _restart_notes(out.restarts):
        try:
            for request in requests:
                cycles.append(split_block(worker.cycle(request), eom))
        except PipelineError as exc:
            out.error = str(exc).splitlines()[0]
        finally:
            worker.stop()
    return cycles, out


__all__ = ["Outcome", "spark", "spark_cycles", "spark_plain", "supervisor", "supervisor_cycles"]
