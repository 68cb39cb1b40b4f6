"""The validated shape of ``stages.yaml``: plain dataclasses the runtime reads."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from etlstage.protocol import vocabulary
from etlstage.protocol.framing import MAX_MESSAGE_BYTES
from etlstage.protocol.markers import Markers
from etlstage.protocol.scenario import Scenario
from etlstage.protocol.vocabulary import BatchDriver, Mode, Offsets, OnFailure, StageType


@dataclass(frozen=True)
class ServiceConfig:
    """A program started before the stages (see ``etlstage.kit.services``)."""

    name: str
    command: list[str]
    ready: str = "line"  # "line": READY on stdout; "exit": runs to completion
    timeout: float = 120.0
    enabled: bool = True
    creates: str | None = None  # ready: exit — skipped when this path exists already
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Timeouts:
    startup: float | None = 120.0  # first reply of a fresh worker
    request: float | None = 600.0  # any later request, counted from when it is at the head
    idle: float | None = None  # silence while a request is outstanding ("any output is life")


@dataclass(frozen=True)
class RestartPolicy:
    max_restarts: int = 5  # tries of one job (and failed starts in a row) before on_failure applies
    backoff: float = 0.5  # first wait before a restart; doubles each time
    backoff_max: float = 30.0


@dataclass(frozen=True)
class OffsetPolicy:
    """How a supervisor-managed cyclic E-stage's requests are made.

    ``counter``: ``{"start": n, "end": n + step}``; ``time``: ISO-8601 instants, windows of
    ``step`` (ISO-8601 duration) that end no later than now - ``lag``.
    """

    kind: str = "counter"
    start: object = 0
    step: object = 1000
    lag: object = None


@dataclass(frozen=True)
class StageConfig:
    name: str
    type: StageType
    command: list[str]
    mode: Mode
    markers: Markers
    batch_size: int = 1000  # the loader makes it 1 outside batch mode
    batch_driver: BatchDriver = BatchDriver.SUPERVISOR
    batch_bytes: int = 4 << 20  # a batch is closed at batch_size messages or at this many bytes
    replay_bytes: int = 8 << 20  # input one worker holds for sending again: in flight, and answered-unconfirmed
    linger: float = 0.2
    offsets: Offsets = Offsets.WORKER
    offset_policy: OffsetPolicy | None = None
    poll_interval: float = 1.0
    instances: int = 1
    partition_by: str | None = None
    native: bool | str = True  # Spark engine: look up a native implementation (True), never (False), this one
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    on_failure: OnFailure = OnFailure.FAIL
    batch_id: bool = False  # L, supervisor-driven batches: each batch opens with its id
    rerun: str = "warn"  # plain E: a run after a completed one warns, or is refused ("refuse")
    deterministic: bool = True  # T: a re-answer equal to what its job handed on is not handed on again
    max_message_bytes: int = MAX_MESSAGE_BYTES
    prefetch: int = 0  # requests written ahead; 0: the mode's default (see jobs_in_flight)
    stop_timeout: float = 10.0
    max_rss: int | None = None

    def label(self, instance: int) -> str:
        """An instance's name in logs, reports and the pipeline state: the stage's name, and
        ``#instance`` when it has several (both engines)."""
        return self.name if self.instances == 1 else f"{self.name}#{instance}"

    def scenario(self, instance: int, state_dir: str) -> Scenario:
        return Scenario(
            type=self.type,
            mode=self.mode,
            batch_size=self.batch_size,
            batch_driver=self.batch_driver,
            offsets=self.offsets,
            markers=self.markers,
            stage=self.name,
            instance=instance,
            instances=self.instances,
            state_dir=state_dir,
            batch_id=self.batch_id,
            stop_timeout=self.stop_timeout,
        )

    @property
    def worker_driven(self) -> bool:
        return vocabulary.worker_driven(self.mode, self.batch_driver)

    @property
    def keyed(self) -> bool:
        """Messages go to instances by a key (``partition_by``; ``""`` is the whole message)."""
        return self.partition_by is not None

    @property
    def jobs_in_flight(self) -> int:
        """Jobs written ahead of the worker's replies (it reads them when it is ready)."""
        if self.worker_driven:
            return 1
        if self.mode == Mode.SINGLE:
            return 1 if self.prefetch == 1 else 2
        return self.prefetch or 2

    @property
    def single_job_size(self) -> int:
        """Single-message mode: requests written in one go (``prefetch`` in all, over two jobs)."""
        return max(1, (self.prefetch or 1000) // 2)

    def argv(self) -> list[str]:
        return list(self.command)


@dataclass(frozen=True)
class EngineConfig:
    """Which engine runs the pipeline (``engine:`` in stages.yaml; flags override it)."""

    kind: str = "supervisor"  # or "spark"
    master: str = "local[*]"
    conf: dict[str, str] = field(default_factory=dict)
    checkpoint: str = ""  # resolved path; "" until resolved: <state_dir>/spark-checkpoint
    trigger: float = 0.0  # seconds between micro-batch starts (processing time)
    native: bool = True  # stages whose program has a native Spark implementation run as Spark itself
    ship: list[str] = field(default_factory=list)  # files and folders copied to every executor (paths)


@dataclass(frozen=True)
class PipelineConfig:
    stages: list[StageConfig]
    state_dir: str
    markers: Markers
    source: str = "stages.yaml"
    base_dir: str = "."
    name: str = "pipeline"
    max_inflight_windows: int = 4
    buffer_bytes: int = 16 << 20
    drain_timeout: float = 30.0  # a graceful stop waits this long for in-flight work, then stops the workers
    services: list[ServiceConfig] = field(default_factory=list)
    http: tuple[str, int] | None = None  # (host, port) of the status page and /metrics; None: off
    engine: EngineConfig = field(default_factory=EngineConfig)

    def stage(self, name: str) -> StageConfig:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)


def split_command(command: str | list[str]) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]
