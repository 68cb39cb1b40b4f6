"""The words of a stage: its type, mode, batch driver and offsets, and what they imply.

They are :class:`~enum.StrEnum` members, so they read, print and compare as the strings
of ``stages.yaml`` and of the ``ETLSTAGE_*`` variables (``Mode.BATCH == "batch"``), and
each rule that combines them is written once, here.

>>> worker_driven(Mode.BATCH, BatchDriver.WORKER), has_requests(StageType.E, Mode.PLAIN)
(True, False)
>>> default_mode(StageType.E), [str(m) for m in MODES[StageType.L]]
(<Mode.PLAIN: 'plain'>, ['single', 'batch'])
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

from etlstage.errors import ConfigError

W = TypeVar("W", bound=StrEnum)


class StageType(StrEnum):
    E = "E"  # extract: produces messages
    T = "T"  # transform: answers each request with zero or more results
    L = "L"  # load: answers each request with EOP alone ("durably written")


class Mode(StrEnum):
    PLAIN = "plain"  # E: one run, no requests
    CYCLIC = "cyclic"  # E: one cycle (window) per request
    SINGLE = "single"  # T/L: one message per request
    BATCH = "batch"  # T/L: a batch per request


class BatchDriver(StrEnum):
    SUPERVISOR = "supervisor"  # EOB closes each batch
    WORKER = "worker"  # the worker asks for more with BNC


class Offsets(StrEnum):
    WORKER = "worker"  # cyclic E: empty requests; the worker keeps its positions
    SUPERVISOR = "supervisor"  # cyclic E: {"start","end"} requests from an offset policy


class OnFailure(StrEnum):
    FAIL = "fail"  # stop the pipeline, nothing committed past the failure
    DEADLETTER = "deadletter"  # set the failing messages aside and go on


MODES: dict[str, tuple[Mode, ...]] = {
    StageType.E: (Mode.PLAIN, Mode.CYCLIC),
    StageType.T: (Mode.SINGLE, Mode.BATCH),
    StageType.L: (Mode.SINGLE, Mode.BATCH),
}


def default_mode(stage_type: str) -> Mode:
    return Mode.PLAIN if stage_type == StageType.E else Mode.SINGLE


def worker_driven(mode: str, batch_driver: str) -> bool:
    """Batches closed by the worker's BNC/EOP dialogue."""
    return mode == Mode.BATCH and batch_driver == BatchDriver.WORKER


def has_requests(stage_type: str, mode: str) -> bool:
    """Plain E is the one scenario with no requests and no EOP."""
    return not (stage_type == StageType.E and mode == Mode.PLAIN)


def word_of(words: type[W], value: str, where: str) -> W:
    """``value`` as a member of ``words``, or a ConfigError that names the place.

    >>> word_of(Mode, "batch", "mode")
    <Mode.BATCH: 'batch'>
    """
    try:
        return words(value)
    except ValueError:
        raise ConfigError([f"{where} {value!r}: expected one of {', '.join(words)}"]) from None


__all__ = [
    "MODES",
    "BatchDriver",
    "Mode",
    "Offsets",
    "OnFailure",
    "StageType",
    "default_mode",
    "has_requests",
    "word_of",
    "worker_driven",
]
