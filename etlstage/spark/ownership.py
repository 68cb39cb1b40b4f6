"""At most one live worker per (stage, partition) on a host, whichever Spark Python process runs it.

Spark does not pin a partition to one of an executor's Python processes, so the task
for partition 3 may find that partition's worker alive in another one.  Ownership then
moves between tasks, and the worker with it: the new task listens on a Unix socket
(abstract, named after the lock) and asks the owner to let go (a ``.release`` file
beside the lock); the owner's watcher thread, as soon as no task of its own uses that
worker, sends the running worker's pipes over the socket (``SCM_RIGHTS``), forgets it
and releases the lock; the new task takes the lock and the worker — no restart, no
state lost.  Should the hand-over fail, the owner stops its worker instead and the new
task starts one, as after a restart.  A worker's in-memory state is never split between
two live processes.  If the owner died instead (its lock released by the kernel), the
new owner waits for the old worker to be gone (the watchdog ends it).

The locks are ``flock`` files in a host-local folder: the guarantee holds per host.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from etlstage.errors import WorkerError


@dataclass
class Handed:
    """A running worker received from another Spark Python process: its pipes and identity."""

    pid: int
    create_time: float
    stdin: int
    stdout: int
    stderr: int
    tail: list[str]

    @classmethod
    def receive(cls, conn: socket.socket) -> Handed | None:
        """What :meth:`etlstage.spark.process.WorkerProcess.hand_over` sent on ``conn``; None if nothing usable came."""
        try:
            note, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        except OSError:
            return None
        try:
            doc = json.loads(note)
            if len(fds) != 3:
                raise ValueError(fds)
            stdin, stdout, stderr = fds
            handed = cls(
                int(doc["pid"]), float(doc["create_time"]), stdin, stdout, stderr, [str(t) for t in doc["tail"]]
            )
            if abs(psutil.Process(handed.pid).create_time() - handed.create_time) > 0.01:
                raise ValueError("a recycled pid")
            return handed
        except (ValueError, KeyError, TypeError, psutil.Error):
            for fd in fds:
                os.close(fd)  # the worker sees its stdin close and stops, as after a stop
            return None


def lock_root() -> Path:
    return Path(tempfile.gettempdir()) / f"etlstage-{os.getuid()}" / "owners"


def retired_marker(run_id: str) -> Path:
    """Present once the run's query has ended: its idle workers on this host stop."""
    return lock_root() / run_id / "retired"


def retire(run_id: str) -> None:
    """Mark ``run_id`` as ended on this host (see :meth:`etlstage.spark.process.Registry`)."""
    marker = retired_marker(run_id)
    marker.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    marker.touch()


class Ownership:
    """The right to run the worker of one (run, stage, partition) on this host."""

    def __init__(self, run_id: str, stage: str, partition: int) -> None:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", stage)
        self.path = lock_root() / run_id / f"{safe}-{partition}.lock"
        self.release_path = self.path.with_suffix(".release")
        self.fd: int | None = None
        self.handed: Handed | None = None  # the running worker the last owner handed over

    @property
    def address(self) -> bytes:
        """Where the next owner waits for the worker: a Linux abstract socket, gone with it."""
        digest = hashlib.sha256(str(self.path).encode()).hexdigest()[:32]
        return f"\0etlstage-handover-{digest}".encode()

    def acquire(self, timeout: float, who: str) -> None:
        """Take ownership, asking the current owner to let go (and hand its worker over);
        raise after ``timeout`` seconds."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + timeout
        listener: socket.socket | None = None
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if listener is None:
                        listener = self._listen()
                        self.release_path.touch()
                    if time.monotonic() >= deadline:
                        raise WorkerError(
                            f"{who}: its worker in another Spark Python process on this host "
                            f"did not hand over within {timeout:g}s"
                        ) from None
                    time.sleep(0.02)
            with contextlib.suppress(FileNotFoundError):
                self.release_path.unlink()
            if listener is not None:
                self.handed = self._receive(listener)
            if self.handed is None:
                self._wait_for_previous(fd, max(0.0, deadline - time.monotonic()), who)
        except BaseException:
            os.close(fd)
            raise
        finally:
            if listener is not None:
                listener.close()
        self.fd = fd

    def _listen(self) -> socket.socket:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(OSError):  # in use: no hand-over, the owner stops its worker
            listener.bind(self.address)
            listener.listen(1)
        return listener

    @staticmethod
    def _receive(listener: socket.socket) -> Handed | None:
        """The worker, if the last owner sent it before letting go of the lock (it did, or never will)."""
        listener.setblocking(False)
        try:
            conn, _ = listener.accept()
        except OSError:
            return None
        with conn:
            conn.settimeout(2.0)
            return Handed.receive(conn)

    def _wait_for_previous(self, fd: int, timeout: float, who: str) -> None:
        """The last owner's worker (pid and start time in the lock file) must have exited."""
        raw = os.pread(fd, 64, 0).split()
        if len(raw) != 2:
            return
        try:
            old = psutil.Process(int(raw[0]))
            if abs(old.create_time() - float(raw[1])) > 0.01:
                return  # the pid was recycled: not our worker
            old.wait(timeout)
        except (psutil.NoSuchProcess, ValueError):
            return
        except psutil.TimeoutExpired:
            raise WorkerError(f"{who}: the previous owner's worker (pid {raw[0].decode()}) is still running") from None

    def record(self, pid: int) -> None:
        """The worker this owner started (for a successor after a crash)."""
        if self.fd is None:
            return
        with contextlib.suppress(psutil.Error):
            text = f"{pid} {psutil.Process(pid).create_time()}".encode()
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, text, 0)

    @property
    def asked(self) -> bool:
        return self.fd is not None and self.release_path.exists()

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, 0)
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


__all__ = ["Handed", "Ownership", "lock_root", "retire", "retired_marker"]
