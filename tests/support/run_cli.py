"""Running the real `etlstage` CLI from tests, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PY = sys.executable

ETLSTAGE = [PY, "-m", "etlstage.cli"]
RUN_ONCE = [*ETLSTAGE, "run", "stages.yaml", "--once", "--no-progress"]


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str


def etlstage(cwd: Path, *args: str, timeout: float = 120, env: dict[str, str] | None = None) -> Run:
    """The real CLI in a subprocess, as a user runs it."""
    proc = subprocess.run(
        [*ETLSTAGE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)
