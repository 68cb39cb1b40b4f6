"""One whole ``etlstage run --once`` of a folder's stages.yaml, timed: what the benchmarks
that compare whole runs (start-up included) share."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

PHASE = re.compile(r"([a-zA-Z -]+?) (\d+(?:\.\d+)?)s")


def timed_run(folder: Path, args: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    """(seconds, what the run wrote to stderr); a failed run stops the benchmark, naming why."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "etlstage.cli", "run", "stages.yaml", "--once", "--no-progress", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        env=env,
    )
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"etlstage run {' '.join(args)} in {folder} failed:\n{done.stderr[-3000:]}")
    return seconds, done.stderr


def startup_phases(stderr: str) -> dict[str, float]:
    """The Spark engine's start-up phases and their seconds, from its summary's ``start-up:`` line."""
    line = next((x for x in stderr.splitlines() if x.startswith("start-up: ")), "")
    return {name.strip(): float(v) for name, v in PHASE.findall(line.removeprefix("start-up:"))}
