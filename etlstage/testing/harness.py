"""The in-memory supervisor harness: drive one worker through any scenario from memory.

It is the supervisor's own stage driver (:mod:`etlstage.runtime.driver`) over a pipe
to a subprocess, or over OS pipes to a Python SDK worker running in a thread of this
process — one implementation of the protocol, not a second one.

>>> result = StageHarness().run(lambda ms: [m.upper() for m in ms], type="T", mode="batch",
...                             batch_size=2, inputs=[b"a", b"b", b"c"])
>>> result.batches
[[b'A', b'B'], [b'C']]
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from etlstage.config.model import RestartPolicy, StageConfig, Timeouts
from etlstage.errors import EtlstageError, PipelineError
from etlstage.kit.stats import StageStats
from etlstage.kit.telling import telling_line
from etlstage.kit.transport import ProcessTransport, Transport
from etlstage.logs import escape_controls
from etlstage.protocol.framing import split_block
from etlstage.protocol.markers import DEFAULT_MARKERS, Markers
from etlstage.protocol.scenario import Scenario
from etlstage.protocol.vocabulary import BatchDriver, Mode, Offsets, OnFailure, StageType, default_mode, word_of
from etlstage.runtime.driver import STOP, ExtractDriver, TransformDriver
from etlstage.runtime.flow import Inbox, Job, Piece, Window
from etlstage.runtime.tasks import run_all
from etlstage.testing.transport import InProcessTransport
from etlstage.worker.base import Worker
from etlstage.worker.runner import serve

WorkerSpec = Sequence[str] | Worker | Callable[..., Any] | type


class WorkerFailed(AssertionError):
    """The worker broke the protocol, crashed or timed out; the message is the supervisor's.

    ``answered``: requests (single), batches or cycles the worker had answered before it failed.
    """

    def __init__(self, message: str, answered: int = 0, cause: str | None = None) -> None:
        super().__init__(message)
        self.answered = answered
        self.cause = cause  # the telling line of the worker's stderr (:mod:`etlstage.kit.telling`)


_INTERPRETERS = re.compile(r"^(python[0-9.]*|node|nodejs|deno|bun|perl|ruby|php|bash|sh|zsh|java|Rscript|lua)$")


def worker_name(worker: WorkerSpec) -> str:
    """What reports call the worker: its script (``node shout.js`` → ``shout.js``), program, or Python name."""
    if isinstance(worker, (list, tuple)):
        argv = [str(a) for a in worker]
        name = os.path.basename(argv[0]) if argv else "worker"
        if _INTERPRETERS.match(name):
            rest = iter(argv[1:])
            for arg in rest:
                if arg == "-m":  # python -m package.module
                    return next(rest, name)
                if not arg.startswith("-"):
                    return os.path.basename(arg)
        return escape_controls(name) or "worker"
    return getattr(worker, "__name__", None) or type(worker).__name__


@dataclass
class HarnessResult:
    batches: list[list[bytes]]  # outputs, one list per request (single) / batch / cycle
    inputs: list[list[bytes]]  # what was sent, grouped the same way
    stderr: list[str] = field(default_factory=list)
    exit_status: int | None = None
    ids: list[str] = field(default_factory=list)  # batch_id=True: each batch's id, as sent

    @property
    def outputs(self) -> list[bytes]:
        return [m for b in self.batches for m in b]


class StageHarness:
    """Runs workers for tests; ``tmp_dir`` holds their ``ETLSTAGE_STATE_DIR``."""

    def __init__(self, tmp_dir: str | None = None) -> None:
        self.tmp_dir = tmp_dir or tempfile.mkdtemp(prefix="etlstage-harness-")

    def run(
        self,
        worker: WorkerSpec,
        *,
        type: str = "T",
        mode: str | None = None,
        inputs: Sequence[bytes] = (),
        batch_size: int = 1,
        batch_driver: str = "supervisor",
        offsets: str = "worker",
        markers: Markers | dict[str, object] | None = None,
        cycles: int = 1,
        requests: Sequence[dict[str, object] | bytes] | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 30.0,
        linger: float = 0.05,
        prefetch: int = 0,
        state_dir: str | None = None,
        settle: float = 0.0,
        name: str | None = None,
        cwd: str | None = None,
        batch_id: bool = False,
        pipeline: str = "",
    ) -> HarnessResult:
        """Drive ``worker`` (argv list, or a Python SDK worker/function run in-process).

        T/L: ``inputs`` are sent in the scenario's shape; E cyclic: ``cycles`` empty
        requests (worker offsets) or the given ``requests`` (supervisor offsets).
        Raises :class:`WorkerFailed` with the supervisor's report if the worker breaks
        the protocol, crashes or exceeds ``timeout``.  ``settle``: seconds to wait before
        the first request, so bytes a worker writes unasked are caught.  ``name``: what
        reports call the worker (default: its script or program, see :func:`worker_name`);
        ``cwd``: the folder a worker process starts in (default: this process's).
        ``batch_id``: an L-stage in batch mode gets each batch's id first (docs/protocol.md:
        batch ids); the result's ``ids`` lists them. The same inputs give the same ids;
        ``pipeline``, the name a batch id is made with, gives others (as another pipeline's).
        """
        m = markers if isinstance(markers, Markers) else Markers.from_mapping(markers or {}, DEFAULT_MARKERS)
        stage_type = word_of(StageType, type, "type")
        mode = mode or default_mode(stage_type)
        in_process = not (isinstance(worker, (list, tuple)))
        python_worker: Any = worker  # an SDK worker whenever in_process
        stage = StageConfig(
            name=name or worker_name(worker),
            type=stage_type,
            command=[str(a) for a in worker] if not in_process else ["<in-process>"],  # type: ignore[union-attr]
            mode=word_of(Mode, mode, "mode"),
            markers=m,
            batch_size=batch_size,
            batch_driver=word_of(BatchDriver, batch_driver, "batch_driver"),
            linger=linger,
            offsets=word_of(Offsets, offsets, "offsets"),
            poll_interval=0.0,
            env=env or {},
            timeouts=Timeouts(startup=timeout, request=timeout, idle=None),
            restart=RestartPolicy(max_restarts=0, backoff=0.0),
            on_failure=OnFailure.FAIL,
            prefetch=prefetch,
            stop_timeout=timeout,
            batch_id=batch_id,
        )
        sdir = state_dir or os.path.join(self.tmp_dir, "state")
        os.makedirs(sdir, exist_ok=True)
        stderr = io.StringIO()
        transports: list[Transport] = []

        async def spawn(st: StageConfig, scenario: Scenario, label: str) -> Transport:
            t: Transport
            if in_process:
                t = InProcessTransport(
                    lambda i, o: serve(python_worker, stdin=i, stdout=o, scenario=scenario, stderr=stderr), label
                )
            else:
                full_env = {**os.environ, **st.env, **scenario.to_env()}
                t = await ProcessTransport.spawn(scenario.expand(st.argv()), full_env, cwd, label)
            transports.append(t)
            return t

        run = _extract if stage_type == StageType.E else _transform
        batches: list[list[bytes]] = []  # filled as answers come: a failure says how many there were
        ids: list[str] = []
        try:
            sent = asyncio.run(run(stage, sdir, spawn, list(inputs), cycles, requests, settle, batches, ids, pipeline))
        except PipelineError as exc:
            # a T/L group is answered once done (it may be empty); an E window once it has output
            answered = len(batches) if stage_type != StageType.E else sum(1 for b in batches if b)
            said = telling_line([*stderr.getvalue().splitlines(), *(x for t in transports for x in t.stderr_tail())])
            raise WorkerFailed(_failure_text(exc), answered, said) from None
        except EtlstageError as exc:  # the worker could not even start
            raise WorkerFailed(str(exc)) from None
        tail: list[str] = []
        status = None
        for t in transports:
            tail.extend(t.stderr_tail())
            status = t.returncode()
        lines = stderr.getvalue().splitlines() + tail
        return HarnessResult(batches, sent, lines, status, ids)


def _failure_text(exc: PipelineError) -> str:
    return str(exc.__cause__ or exc)


async def _transform(
    stage: StageConfig,
    sdir: str,
    spawn: Any,
    inputs: list[bytes],
    cycles: int,
    requests: Any,
    settle: float,
    batches: list[list[bytes]],
    ids: list[str],
    pipeline: str,
) -> list[list[bytes]]:
    eom = stage.markers.EOM
    window = Window("harness", 0, 3)
    inbox = Inbox(eom, 1 << 30)

    async def fill() -> None:
        await asyncio.sleep(settle)
        if inputs:
            block = eom.join(inputs) + eom
            window.add(1, len(inputs))
            inbox.put_nowait(Piece(block, len(inputs), window))
        window.close()
        inbox.close()

    sent: list[list[bytes]] = []

    def on_job_done(job: Job) -> None:
        messages = split_block(job.block, eom)
        results = split_block(b"".join(job.results), eom)
        if job.ident is not None:
            ids.append(job.ident)
        if job.batch:
            batches.append(results)
            sent.append(messages)
            return
        # single mode: one group per request, cut at each EOP
        counts = [b"".join(job.results[:end]).count(eom) for end in job.bounds]
        start = 0
        for i, end in enumerate(counts):
            batches.append(results[start:end])
            sent.append(messages[i : i + 1])
            start = end

    async def emit(piece: Piece) -> None:
        return None

    driver = TransformDriver(stage, 1, sdir, spawn, StageStats("harness", stage.type), [inbox], emit, lambda *a: None)
    driver.on_job_done = on_job_done
    driver.pipeline_name = pipeline
    await run_all(driver.run(), fill())
    return sent


async def _extract(
    stage: StageConfig,
    sdir: str,
    spawn: Any,
    inputs: list[bytes],
    cycles: int,
    requests: Any,
    settle: float,
    batches: list[list[bytes]],
    ids: list[str],
    pipeline: str,
) -> list[list[bytes]]:
    import json

    eom = stage.markers.EOM
    windows: list[Window] = []
    outputs: dict[int, list[bytes]] = {}
    sent: list[list[bytes]] = []
    queue: list[bytes]
    if requests is not None:
        queue = [r if isinstance(r, bytes) else json.dumps(r, separators=(",", ":")).encode() for r in requests]
    else:
        queue = [b""] * cycles

    def open_window(label: str, request: object) -> Window:
        w = Window(label, len(windows), 2, request)
        windows.append(w)
        outputs[w.seq] = []
        batches.append(outputs[w.seq])  # the same list: filled as the cycle's messages come
        return w

    async def next_request(label: str) -> object:
        if not sent:
            await asyncio.sleep(settle)
        if not queue:
            return STOP
        r = queue.pop(0)
        sent.append([r])
        return r

    async def emit(piece: Piece) -> None:
        outputs[piece.window.seq].extend(split_block(piece.block, eom))

    driver = ExtractDriver(stage, sdir, spawn, StageStats("harness", "E"), emit, open_window, next_request, once=False)
    await driver.run()
    if stage.mode == Mode.PLAIN:
        sent = [[]]
    return sent
