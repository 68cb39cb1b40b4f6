"""Looking at other processes while they may be exiting."""

from __future__ import annotations

import psutil


def live_command(process: psutil.Process) -> str | None:
    """``process``'s command line, or None once it has exited (gone, or a zombie not yet
    reaped: psutil raises for a zombie's command line, and ``is_running()`` is still true)."""
    try:
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return " ".join(process.cmdline())
    except psutil.Error:
        return None
