"""Tests only: a worker SIGKILLs itself at a named point, when an environment variable says so.

Crash tests use it to kill exactly inside a gap that a kill from outside rarely hits (after
a write is durable, before it is acknowledged)."""

from __future__ import annotations

import os
import signal


def crash_point(variable: str, name: str) -> None:
    """SIGKILL this process if ``$variable`` is ``name``."""
    if os.environ.get(variable) == name:
        os.kill(os.getpid(), signal.SIGKILL)
