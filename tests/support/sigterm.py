"""`etlstage run` in the background, stopped with one SIGTERM once the test says it is time."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.run_cli import ETLSTAGE


def run_then_sigterm(
    cwd: Path, when: Callable[[subprocess.Popen[str]], object], within: float = 60.0
) -> tuple[int, str, float]:
    """Start ``etlstage run stages.yaml`` in ``cwd``; once ``when(proc)`` returns, send it
    SIGTERM and wait at most ``within`` seconds for its end. Returns (exit status, stderr,
    seconds from the signal to the end); the run is killed if it outlives the test."""
    proc = subprocess.Popen(
        [*ETLSTAGE, "run", "stages.yaml", "--no-progress"], cwd=cwd, stderr=subprocess.PIPE, text=True
    )
    try:
        when(proc)
        stopped = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=within)
        return proc.returncode, err, time.monotonic() - stopped
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
