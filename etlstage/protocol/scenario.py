"""Scenarios: which conversation a stage has with its worker (DESIGN.md §2).

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
from etlstage.protocol.markers import DEFAULT_MARKERS, Markers

STAGE_TYPES = ("E", "T", "L")
MODES = {"E": ("plain", "cyclic"), "T": ("single", "batch"), "L": ("single", "batch")}


@dataclass(frozen=True)
class Scenario:
    type: str = "T"
    mode: str = "single"
    batch_size: int = 1
    batch_driver: str = "supervisor"  # or "worker" (BNC)
    offsets: str = "worker"  # cyclic E only: "worker" or "supervisor"
    markers: Markers = field(default=DEFAULT_MARKERS)
    stage: str = "stage"
    instance: int = 0
    instances: int = 1
    state_dir: str = ""

    def __post_init__(self) -> None:
        problems = []
        if self.type not in STAGE_TYPES:
            problems.append(f"type {self.type!r}: expected one of E, T, L")
        elif self.mode not in MODES[self.type]:
            problems.append(
                f"mode {self.mode!r} for a {self.type}-stage: expected one of {', '.join(MODES[self.type])}"
            )
        if self.batch_driver not in ("supervisor", "worker"):
            problems.append(f"batch_driver {self.batch_driver!r}: expected supervisor or worker")
        if self.offsets not in ("worker", "supervisor"):
            problems.append(f"offsets {self.offsets!r}: expected worker or supervisor")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            problems.append(f"batch_size {self.batch_size!r}: expected an integer >= 1")
        if problems:
            raise ConfigError(problems, f"stage {self.stage!r}")

    # --- what the conversation looks like --------------------------------------------

    @property
    def is_batch(self) -> bool:
        return self.mode == "batch"

    @property
    def worker_driven(self) -> bool:
        return self.mode == "batch" and self.batch_driver == "worker"

    @property
    def has_requests(self) -> bool:
        """Plain E is the one scenario with no requests and no EOP."""
        return not (self.type == "E" and self.mode == "plain")

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
        scenario = cls(
            type=get("TYPE", "T"),
            mode=get("MODE", "single" if get("TYPE", "T") != "E" else "plain"),
            batch_size=batch_size,
            batch_driver=get("BATCH_DRIVER", "supervisor"),
            offsets=get("OFFSETS", "worker"),
            markers=Markers.from_env(env),
            stage=get("STAGE", "stage"),
            instance=instance,
            instances=instances,
            state_dir=get("STATE_DIR", ""),
        )
        return replace(scenario, **overrides) if overrides else scenario  # type: ignore[arg-type]
