"""A worker's exit ends its output, and its process group goes with it: one rule for both engines.

A worker is started as the leader of a new session, so its process group id is its pid
and every child it starts (unless that child makes a session of its own) is in that
group.  A child that inherited the worker's stdout keeps the pipe open after the worker
exits, so the end of file that would tell the stage the worker is gone never comes: the
stage would wait for its request time limit.  Hence the rule (docs/protocol.md): once
the worker process has exited, what is already in the pipe is read for
:data:`EXIT_DRAIN` seconds at most; then its output counts as ended, the exit is the
failure, and the group is killed (no orphans).
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import os
import signal
import termios

import psutil

EXIT_DRAIN = 1.0  # seconds to read what an exited worker left in its stdout pipe


def kill_group(pgid: int | None) -> None:
    """SIGKILL every process left in the process group ``pgid`` (a worker's pid).

    Safe after the leader was reaped: Linux keeps a pid from being reused while a process
    group of that id has members; with none left, nothing is signalled."""
    if pgid is None or pgid <= 1:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def pipe_pending(fd: int) -> int:
    """How many bytes wait unread in the pipe ``fd`` (0 when it cannot be told)."""
    buf = array.array("i", [0])
    try:
        fcntl.ioctl(fd, termios.FIONREAD, buf, True)
    except OSError:
        return 0
    return buf[0]


def kill_everything(pid: int) -> None:
    """SIGKILL process ``pid``, every descendant it has, and every process group among them.

    Workers run in sessions of their own, so killing a run's process group misses them and
    their children: the descendants are found first (through their parents), then each of
    their groups goes, which also reaches a child whose parent already exited."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        tree = []
    groups = set()
    for p in tree:
        with contextlib.suppress(OSError):
            groups.add(os.getpgid(p.pid))
    for p in tree:
        with contextlib.suppress(psutil.Error):
            p.kill()
    for pgid in groups:
        if pgid != os.getpgrp():  # never our own group
            kill_group(pgid)


__all__ = ["EXIT_DRAIN", "kill_everything", "kill_group", "pipe_pending"]
