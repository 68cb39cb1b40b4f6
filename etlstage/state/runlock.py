"""One run at a time per pipeline state, whichever engine runs it.

The lock is ``flock`` on ``run.lock`` in the pipeline's state folder, held by the
process that runs the pipeline (the supervisor, or the Spark driver's Python process)
for as long as it lives: the kernel releases it when that process ends, however it
ends, so a SIGKILLed run leaves nothing that blocks the next one.  The file holds the
holder's details as JSON (pid, host, engine, pipeline file, start time) — read to name
the holder to a second run, by ``etlstage status``, and, once the run is over, to know
which engine ran the pipeline last.  The descriptor is close-on-exec: workers,
services and the JVM never inherit the lock.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from etlstage.errors import StateError

FILE = "run.lock"


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    engine: str  # supervisor | spark | deadletter (a command that changes the state briefly)
    started_at: float
    file: str = ""  # the pipeline file, resolved
    # the last run's engine and pipeline file (this holder's own, unless it is a deadletter command)
    last_engine: str = ""
    last_file: str = ""

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(self.started_at))
        return f"pid {self.pid} on {self.host}, engine {self.engine}, started at {when}" + (
            f", pipeline file {self.file}" if self.file else ""
        )


def _parse(text: str) -> Holder | None:
    try:
        raw = json.loads(text)
        return Holder(
            int(raw["pid"]),
            str(raw["host"]),
            str(raw["engine"]),
            float(raw["started_at"]),
            str(raw["file"]),
            str(raw.get("last_engine", "")),
            str(raw.get("last_file", "")),
        )
    except (ValueError, KeyError, TypeError):
        return None  # empty (being written) or not ours


def _open(path: Path, flags: int) -> int:
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StateError(f"{path} is a symbolic link; etlstage does not follow links where it writes state")
        raise StateError(f"cannot open the run lock {path}: {exc.strerror}") from None


def _read(fd: int) -> Holder | None:
    os.lseek(fd, 0, os.SEEK_SET)
    return _parse(os.read(fd, 65536).decode(errors="replace"))


class RunLock:
    """The run lock of the pipeline whose state is in ``state_dir``; :meth:`acquire` it once."""

    def __init__(self, state_dir: str | Path) -> None:
        self.path = Path(state_dir) / FILE
        self.fd: int | None = None
        self.previous: Holder | None = None  # the last run's details, as they were when we took the lock

    def acquire(self, engine: str, file: str = "", what: str = "run") -> Holder:
        """Take the lock or raise :class:`StateError` naming its holder; our details are written in it."""
        import fcntl

        fd = _open(self.path, os.O_RDWR | os.O_CREAT)
        # a reader (status) takes a shared lock for an instant: try a few times before calling it held
        for attempt in range(20):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == 19:
                    holder = _read(fd)
                    os.close(fd)
                    raise StateError(
                        f"cannot {what}: another run holds this pipeline's state ({self.path}): "
                        + (holder.describe() if holder else "its details are not written yet")
                        + ". One run at a time per pipeline: wait for it to end, or stop it"
                    ) from None
                time.sleep(0.05)
        self.previous = _read(fd)
        last = (engine, file)
        if engine == "deadletter" and self.previous is not None:  # not a run: the last run stays the last
            last = (self.previous.last_engine, self.previous.last_file)
        me = Holder(os.getpid(), socket.gethostname(), engine, time.time(), file, *last)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(asdict(me)).encode(), 0)
        self.fd = fd
        return me

    def release(self) -> None:
        """Give the lock up (a process that ends gives it up anyway); the details stay as the last run's."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def holder(state_dir: str | Path) -> Holder | None:
    """Who holds the run lock now, or None when no run does."""
    import fcntl

    path = Path(state_dir) / FILE
    if not path.is_file():
        return None
    fd = _open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read(fd) or Holder(0, "?", "?", 0.0)
        return None
    finally:
        os.close(fd)  # releases our shared lock, if we took it


def last_holder(state_dir: str | Path) -> Holder | None:
    """The details of the run that holds the lock, or else of the last run that held it."""
    path = Path(state_dir) / FILE
    try:
        return _parse(path.read_text())
    except OSError:
        return None


__all__ = ["FILE", "Holder", "RunLock", "holder", "last_holder"]
