"""The engines a pipeline runs on, behind one interface (:class:`~etlstage.engines.base.Engine`):
the supervisor (:mod:`etlstage.runtime`) and Spark (:mod:`etlstage.spark`).

Each implementation is imported only when its engine is asked for: naming the engines
here loads neither.
"""

from __future__ import annotations

from collections.abc import Callable

from etlstage.engines.base import Engine


def _supervisor() -> Engine:
    from etlstage.engines.supervisor import SupervisorEngine

    return SupervisorEngine()


def _spark() -> Engine:
    from etlstage.engines.spark import SparkEngine

    return SparkEngine()


_ENGINES: dict[str, Callable[[], Engine]] = {"supervisor": _supervisor, "spark": _spark}
KINDS = tuple(_ENGINES)  # as stages.yaml's engine.kind and --engine name them


def engine_for(kind: str) -> Engine:
    """The engine named ``kind`` (one of :data:`KINDS`; the config's loader has checked it)."""
    try:
        return _ENGINES[kind]()
    except KeyError:
        raise ValueError(f"no engine {kind!r} (the engines: {', '.join(KINDS)})") from None


def engine_that_ran(recorded: str, configured: str) -> Engine:
    """The engine the run lock names (the one that runs or ran the pipeline, whatever the file
    says now), or the file's when the lock names none (no run yet, a ``deadletter`` command)."""
    return engine_for(recorded if recorded in KINDS else configured)
