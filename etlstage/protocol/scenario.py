"""Scenarios: which conversation a stage has with its worker (docs/protocol.md).

A :class:`Scenario` is the run instruction: the same values reach a worker as the
``ETLSTAGE_*`` environment variables and as ``{eom}``-style command placeholders.

===================================  ======================  ==========================
scenario                             supervisor -> worker    worker -> supervisor
===================================  ======================  ==========================
E plain                              (nothing)               ``a\\nb\\n`` then exit 0
E cyclic, worker offsets             ``\\n``                  ``a\\nb\\n\\x00``
E cyclic, supervisor offsets         ``{"start":S,"end":E}\\n``  ``a\\n\\x00``
T single                             ``m\\n``                 ``r1\\nr2\\n\\x00``
T batch, supervisor-driven, size 3   ``m1\\nm2\\nm3\\n\\x17``     ``r1\\n\\x00``
T batch, worker-driven, size 3       ``m1\\n`` ``m2\\n`` ``m3\\n``  ``\\x11`` ``\\x11`` ``r1\\nr2\\n\\x00``
L (any T mode)                       as T                    ``\\x00``
===================================  ======================  ==========================
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from etlstage.errors import ConfigError
from etlstage.protocol import vocabulary
from etlstage.protocol.markers import DEFAULT_MARKERS, Markers
from etlstage.protocol.vocabulary import MODES, BatchDriver, Mode, Offsets, StageType, word_of


@dataclass(frozen=True)
class Scenario:
    type: StageType = StageType.T
    mode: Mode = Mode.SINGLE
    batch_size: int = 1
    batch_driver: BatchDriver = BatchDriver.SUPERVISOR  # or WORKER (BNC)
    offsets: Offsets = Offsets.WORKER  # cyclic E only
    markers: Markers = field(default=DEFAULT_MARKERS)
    stage: str = "stage"
    instance: int = 0
    instances: int = 1
    state_dir: str = ""
    batch_id: bool = False  # L batch mode: each batch opens with its id (docs/protocol.md: batch ids)
    stop_timeout: float | None = None  # seconds the engine waits for the worker to exit once its stdin closed

    def __post_init__(self) -> None:
        problems = []
        for name, words in (("type", StageType), ("mode", Mode), ("batch_driver", BatchDriver), ("offsets", Offsets)):
            value = getattr(self, name)
            if value in tuple(words):
                object.__setattr__(self, name, words(value))  # the plain strings of a caller become members
            else:
                problems.append(f"{name} {value!r}: expected one of {', '.join(words)}")
        if not problems and self.mode not in MODES[self.type]:
            problems.append(
                f"mode {self.mode!r} for a {self.type}-stage: expected one of {', '.join(MODES[self.type])}"
            )
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            problems.append(f"batch_size {self.batch_size!r}: expected an integer >= 1")
        if problems:
            raise ConfigError(problems, f"stage {self.stage!r}")

    # --- what the conversation looks like --------------------------------------------

    @property
    def is_batch(self) -> bool:
        return self.mode == Mode.BATCH

    @property
    def worker_driven(self) -> bool:
        return vocabulary.worker_driven(self.mode, self.batch_driver)

    @property
    def has_requests(self) -> bool:
        """Plain E is the one scenario with no requests and no EOP."""
        return vocabulary.has_requests(self.type, self.mode)

    def to_env(self) -> dict[str, str]:
        env = self.markers.to_env()
        env.update(
            ETLSTAGE_STAGE=self.stage,
            ETLSTAGE_TYPE=self.type,
            ETLSTAGE_MODE=self.mode,
            ETLSTAGE_BATCH_SIZE=str(self.batch_size),
            ETLSTAGE_BATCH_DRIVER=self.batch_driver,
            ETLSTAGE_OFFSETS=self.offsets,
            ETLSTAGE_INSTANCE=str(self.instance),
            ETLSTAGE_INSTANCES=str(self.instances),
            ETLSTAGE_STATE_DIR=self.state_dir,
        )
        if self.batch_id:  # only when asked for: a worker that never heard of ids sees nothing new
            env["ETLSTAGE_BATCH_ID"] = "1"
        if self.stop_timeout is not None:  # what an engine running the worker gives it to exit
            env["ETLSTAGE_STOP_TIMEOUT"] = f"{self.stop_timeout:g}"
        return env

    def placeholders(self) -> dict[str, str]:
        """Values for ``{eom}``-style placeholders in a stage's command."""
        return {k[len("ETLSTAGE_") :].lower(): v for k, v in self.to_env().items()}

    def expand(self, argv: list[str]) -> list[str]:
        """``argv`` with ``{eom}``, ``{batch_size}``, … replaced; other braces are left alone.

        ``{{eom}}`` stands for a literal ``{eom}``.
        """
        values = self.placeholders()
        pattern = re.compile(r"\{\{(" + "|".join(values) + r")\}\}|\{(" + "|".join(values) + r")\}")

        def sub(m: re.Match[str]) -> str:
            return "{" + m.group(1) + "}" if m.group(1) else values[m.group(2)]

        return [pattern.sub(sub, arg) for arg in argv]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Scenario:
        """The scenario a worker was started in, from ``ETLSTAGE_*`` (defaults if unset)."""
        env = os.environ if env is None else env

        def get(name: str, default: str) -> str:
            value = env.get(f"ETLSTAGE_{name}")
            return default if value in (None, "") else value

        try:
            batch_size = int(get("BATCH_SIZE", "1"))
            instance = int(get("INSTANCE", "0"))
            instances = int(get("INSTANCES", "1"))
        except ValueError as exc:
            raise ConfigError([f"ETLSTAGE_* environment: {exc}"]) from None
        stage_type = word_of(StageType, get("TYPE", "T"), "ETLSTAGE_TYPE")
        scenario = cls(
            type=stage_type,
            mode=word_of(Mode, get("MODE", vocabulary.default_mode(stage_type)), "ETLSTAGE_MODE"),
            batch_size=batch_size,
            batch_driver=word_of(BatchDriver, get("BATCH_DRIVER", "supervisor"), "ETLSTAGE_BATCH_DRIVER"),
            offsets=word_of(Offsets, get("OFFSETS", "worker"), "ETLSTAGE_OFFSETS"),
            markers=Markers.from_env(env),
            stage=get("STAGE", "stage"),
            instance=instance,
            instances=instances,
            state_dir=get("STATE_DIR", ""),
            batch_id=get("BATCH_ID", "0") == "1",
        )
        return replace(scenario, **overrides) if overrides else scenario  # type: ignore[arg-type]
