"""Whether a worker is waiting for its first request: every thread of its process tree
blocked reading its stdin pipe (or, a shell around it, waiting for a child).

A tree in that state cannot write until it is given input: whatever it wrote at start-up
is already in its stdout pipe.  So the start-up quiet (``STARTUP_QUIET``, the time a fresh
worker is watched for output before its first request) can end there instead of running
its full length.  Linux only (``/proc/<pid>/task/<tid>/syscall``); anything unknown or
unreadable answers False, and the full quiet is waited.
"""

from __future__ import annotations

import os
import platform

# (read, readv) and (wait4, waitid) system call numbers, by machine
_CALLS = {
    "x86_64": ((0, 19), (61, 247)),
    "aarch64": ((63, 65), (260, 95)),
}
_READS, _WAITS = _CALLS.get(platform.machine(), ((), ()))
MAX_PROCESSES = 16  # a bigger tree is not walked: the full quiet is waited


def _threads_waiting(pid: int, pipe: str) -> bool:
    """Every thread of ``pid`` in a read of ``pipe`` (``pipe:[inode]``) or a wait for a child."""
    tasks = os.listdir(f"/proc/{pid}/task")
    for tid in tasks:
        with open(f"/proc/{pid}/task/{tid}/syscall") as f:
            fields = f.read().split()
        if not fields or not fields[0].isdigit():
            return False  # "running", or -1: not in a system call
        call = int(fields[0])
        if call in _WAITS:
            continue
        if call not in _READS or len(fields) < 2:
            return False
        if os.readlink(f"/proc/{pid}/fd/{int(fields[1], 16)}") != pipe:
            return False
    return bool(tasks)


def _tree(pid: int) -> list[int] | None:
    """``pid`` and its descendants (None: more than :data:`MAX_PROCESSES`)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        if len(found) > MAX_PROCESSES:
            return None
        for tid in os.listdir(f"/proc/{p}/task"):
            with open(f"/proc/{p}/task/{tid}/children") as f:
                todo.extend(int(c) for c in f.read().split())
    return found


def waiting_on_stdin(pid: int, stdin_fd: int) -> bool:
    """Whether every thread of ``pid``'s process tree is blocked reading the pipe whose
    write end is our ``stdin_fd`` (or in a wait for a child).  False when not known."""
    if not _READS:
        return False
    try:
        pipe = f"pipe:[{os.fstat(stdin_fd).st_ino}]"
        tree = _tree(pid)
        return tree is not None and all(_threads_waiting(p, pipe) for p in tree)
    except (OSError, ValueError):
        return False  # gone meanwhile, not ours to read, no /proc


__all__ = ["MAX_PROCESSES", "waiting_on_stdin"]
