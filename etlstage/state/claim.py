"""Taking a pipeline's state for a run: its own folder, one run at a time, one pipeline file.

What ``etlstage run`` (either engine) and ``etlstage deadletter replay`` do before
anything starts: move the flat layout of an older version into the pipeline's folder,
take the run lock (:mod:`etlstage.state.runlock`), refuse a second pipeline file whose
``name`` leads to the same folder, and create the state store so ``status`` and
``deadletter`` find it whichever engine runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from etlstage.errors import StateError
from etlstage.state.layout import migrate_flat
from etlstage.state.runlock import Holder, RunLock
from etlstage.state.store import StateStore, ancestors_problem, ensure_private_dir


def claim(
    state_dir: str | Path,
    engine: str,
    file: str,
    shares_state: Callable[[str], bool],
    what: str = "run",
) -> RunLock:
    """The run lock of the pipeline in ``state_dir``, held; :class:`StateError` if it cannot be.

    ``shares_state(other)``: whether pipeline file ``other`` (the last one that ran with
    this state) still leads to this state folder — then two files would share one state.
    """
    ensure_private_dir(Path(state_dir).parent)  # state_dir as the file names it: owner-only too
    swap = ancestors_problem(Path(state_dir).parent)  # again, now that the levels etlstage made exist
    if swap:
        raise StateError(swap)
    migrate_flat(state_dir)
    ensure_private_dir(state_dir)
    lock = RunLock(state_dir)
    lock.acquire(engine, os.path.realpath(file), what)
    try:
        _one_file(lock.previous, os.path.realpath(file), state_dir, shares_state)
        StateStore(state_dir).close()
    except BaseException:
        lock.release()
        raise
    return lock


def _one_file(previous: Holder | None, file: str, state_dir: str | Path, shares_state: Callable[[str], bool]) -> None:
    problem = shared_state(previous, file, state_dir, shares_state)
    if problem:
        raise StateError(problem)


def shared_state(
    previous: Holder | None, file: str, state_dir: str | Path, shares_state: Callable[[str], bool]
) -> str | None:
    """Why pipeline file ``file`` may not run with the state in ``state_dir``: another file
    that ran with it last still leads there (a copy of the file, say).  ``run`` refuses it,
    ``validate`` warns of it."""
    other = previous.last_file if previous is not None else ""
    if not other or other == file:
        return None
    if os.path.exists(other) and shares_state(other):
        return (
            f"{file} and {other} both name their pipeline so that it keeps its state in {state_dir}: "
            "two pipeline files would share one state (offsets, dead letters) and each would skip what the "
            "other extracted. Give one of them another `name:` (or another state_dir)"
        )
    return None


__all__ = ["claim", "shared_state"]
