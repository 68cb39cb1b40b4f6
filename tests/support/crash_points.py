"""Where a SIGKILL of a Spark-engine run lands, read from its checkpoint, and kills aimed there.

A kill matrix proves something new only when its kills reach different points of a run.
Timed kills (a random 5-14 s into a run) mostly land in the JVM's start-up on a slow
machine and prove the same thing several times over; these kills wait for the point they
aim at and record the point they actually hit, read from Spark's checkpoint at the moment
of the kill:

- ``start-up``: no micro-batch of this run has logged its offsets yet;
- ``mid-batch``: a batch's offsets are logged and its commit is not (the sink may be half
  way: the replay must load it once);
- ``committed``: the last batch logged is committed (between two batches).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

POINTS = ("start-up", "mid-batch", "committed")


def _last(folder: Path) -> int:
    ids = [int(p.name) for p in folder.glob("[0-9]*") if p.name.isdigit()] if folder.is_dir() else []
    return max(ids, default=-1)


_checkpoints: dict[Path, Path] = {}  # state folder -> its Spark checkpoint, once found


def progress(state: Path) -> tuple[int, int]:
    """(the last micro-batch whose offsets are logged, the last one committed; -1: none) of
    the Spark checkpoint under the state folder ``state`` (wherever the pipeline's layout puts it).
    Asked twenty times a second: the folder is searched for until found, then remembered
    (the search walks every file of the state: CPU the run under test needs)."""
    found = _checkpoints.get(state)
    if found is None or not found.is_dir():
        found = next(state.rglob("spark-checkpoint"), None) if state.is_dir() else None
        if found is None:
            return -1, -1
        _checkpoints[state] = found
    return _last(found / "offsets"), _last(found / "commits")


def point(state: Path, at_start: tuple[int, int]) -> str:
    offsets, commits = progress(state)
    if offsets <= at_start[0]:
        return "start-up"
    return "mid-batch" if offsets > commits else "committed"


def kill_at(
    proc: subprocess.Popen[bytes],
    state: Path,
    aim: str,
    rng: random.Random,
    within: float = 300,
    inside: Callable[[], bool] = lambda: True,
) -> str | None:
    """SIGKILL ``proc``'s process group once the run reaches ``aim`` (``mid-batch``: and
    ``inside()`` holds, e.g. the batch's output has begun); the point the kill hit (read once
    the run is dead, so nothing moves after it), or None when the run ended first."""
    at_start = progress(state)
    deadline = time.monotonic() + within
    if aim == "start-up":
        time.sleep(rng.uniform(1.0, 3.0))  # the JVM takes longer than this to log a first batch
    else:
        while time.monotonic() < deadline and proc.poll() is None:
            if point(state, at_start) == aim and (aim != "mid-batch" or inside()):
                break
            time.sleep(0.05)
        if aim == "mid-batch":
            time.sleep(rng.uniform(0.0, 0.5))  # somewhere in the batch, seeded
    if proc.poll() is not None:
        return None
    os.killpg(proc.pid, signal.SIGKILL)  # the driver, its JVM and its workers, as a machine's crash
    proc.wait(30)
    return point(state, at_start)


def kill_at_each_point(
    start: Callable[[], subprocess.Popen[bytes]],
    state: Path,
    seed: int,
    most: int = 5,
    after_kill: Callable[[str], None] = lambda hit: None,
    inside: Callable[[], bool] = lambda: True,
) -> list[str]:
    """Runs started by ``start``, each killed at a point of :data:`POINTS` not hit yet, until
    every point is hit or ``most`` kills have landed; the points hit, in order. A run that
    ends before its kill stops the matrix (the caller's final run finds nothing left).
    ``inside``: what the mid-batch kill waits for too (see :func:`kill_at`)."""
    rng = random.Random(seed)
    hit: list[str] = []
    while len(hit) < most and not set(POINTS) <= set(hit):
        aim = next(p for p in POINTS if p not in hit)
        got = kill_at(start(), state, aim, rng, inside=inside)
        if got is None:
            break
        hit.append(got)
        after_kill(got)
    return hit
