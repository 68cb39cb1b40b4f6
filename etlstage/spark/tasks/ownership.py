"""At most one live worker per (stage, partition) on a host, whichever Spark Python process runs it.

Spark does not pin a partition to one of an executor's Python processes, so the task
for partition 3 may find that partition's worker alive in another one.  Ownership then
moves between tasks, and the worker with it: the new task listens on a Unix socket
beside the lock and asks the owner to let go (a ``.release`` file holding its pid);
the owner's watcher thread, as soon as no task of its own uses that worker, connects,
checks that the listener is the process that asked, sends the running worker's pipes
over the socket (``SCM_RIGHTS``), forgets it and releases the lock; the new task takes
the lock and the worker — no restart, no state lost.  Should the hand-over fail, the
owner stops its worker instead and the new task starts one, as after a restart.  A
worker's in-memory state is never split between two live processes.  If the owner died
instead (its lock released by the kernel), the new owner waits for the old worker to be
gone (the watchdog ends it).

The locks are ``flock`` files in a host-local folder: the guarantee holds per host.
That folder (``$TMPDIR/etlstage-<uid>/owners/<run>``) is checked at every level as the
state directory is: ours, 0700, no links (refused otherwise), so no other user can
reach the socket, plant a link where a lock file is written, or read the pipes; and
each side of a hand-over checks its peer (``SO_PEERCRED``: our uid, the expected pid).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import socket
import stat
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from etlstage.errors import StateError, WorkerError
from etlstage.state.store import ancestors_problem, ensure_private_dir

log = logging.getLogger("etlstage.spark")


@dataclass
class PassedWorker:
    """A running worker received from another Spark Python process: its pipes and identity."""

    pid: int
    create_time: float
    stdin: int
    stdout: int
    stderr: int
    tail: list[str]

    @classmethod
    def receive(cls, conn: socket.socket, sender: int | None) -> PassedWorker | None:
        """What :meth:`etlstage.spark.tasks.process.WorkerProcess.hand_over` sent on ``conn``; None if nothing
        usable came, or if the peer is not process ``sender`` of our user."""
        if sender is None or not peer_is(conn, sender):
            return None
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


@dataclass(frozen=True)
class Rendezvous:
    """Where the next owner waits for the worker (a socket in the owner-only run folder), and
    the pid of the process that asked for it: the only listener the worker goes to."""

    path: str
    pid: int | None


def peer_is(sock: socket.socket, pid: int | None) -> bool:
    """The other end of the connected Unix socket ``sock`` is process ``pid`` of our user."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    peer_pid, peer_uid, _ = struct.unpack("3i", raw)
    return peer_uid == os.geteuid() and pid is not None and peer_pid == pid


LOCK_BASE_ENV = "ETLSTAGE_LOCK_BASE"  # the folder the CLI chose (choose_lock_base), for Spark's processes
LOCK_HINT = (
    "remove it (it holds only the Spark engine's lock files), or point TMPDIR at a folder of yours "
    "(the lock folder is $TMPDIR/etlstage-<uid>)"
)


def default_lock_base() -> Path:
    return Path(tempfile.gettempdir()) / f"etlstage-{os.getuid()}"


def fallback_lock_base() -> Path:
    """A private per-user folder, used when another user took :func:`default_lock_base`:
    ``$XDG_RUNTIME_DIR/etlstage`` when that is yours, else one per host under your home."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    with contextlib.suppress(OSError):
        if runtime and os.path.isabs(runtime) and os.stat(runtime).st_uid == os.geteuid():
            return Path(runtime) / "etlstage"
    return Path.home() / ".cache" / "etlstage" / f"locks-{socket.gethostname()}"


def lock_base_problem(base: Path) -> str | None:
    """Why ``base`` cannot hold the lock folders (another user's, a link, a folder others
    could swap), or None: missing is fine, it is made owner-only."""
    me = os.geteuid()
    for level in (base, base / "owners"):
        try:
            st = os.lstat(level)
        except FileNotFoundError:
            break
        except OSError as exc:
            return f"the Spark engine's lock folder {level}: {exc.strerror}"
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            return f"the Spark engine's lock folder {level} is not a folder (a link or a file)"
        if st.st_uid != me:
            return f"the Spark engine's lock folder {level} belongs to uid {st.st_uid}, not to you (uid {me})"
    return ancestors_problem(base, "the Spark engine's lock folder", LOCK_HINT)


def lock_base() -> Path:
    """The folder of this host's lock folders: the one the CLI chose, else the default
    unless another user took it, else :func:`fallback_lock_base` (executors decide alike)."""
    chosen = os.environ.get(LOCK_BASE_ENV)
    if chosen:
        return Path(chosen)
    base = default_lock_base()
    return fallback_lock_base() if lock_base_problem(base) else base


def choose_lock_base() -> Path:
    """Before Spark starts (the CLI): the lock folder of this run, checked and made owner-only;
    :class:`StateError` (exit 2) naming it when neither the default nor the fallback can be used.
    Spark's processes on this host find the choice in the environment they inherit."""
    base = default_lock_base()
    problem = lock_base_problem(base)
    if problem:
        fallback = fallback_lock_base()
        second = lock_base_problem(fallback)
        if second:
            raise StateError(f"{problem}; {LOCK_HINT}. The fallback is no better: {second}")
        log.warning("%s; using %s instead (%s)", problem, fallback, LOCK_HINT)
        base = fallback
    try:
        for level in (base, base / "owners"):
            ensure_private_dir(level)
    except StateError as exc:
        raise StateError(f"the Spark engine's lock folder {base}: {exc}") from None
    os.environ[LOCK_BASE_ENV] = str(base)
    return base


def lock_root() -> Path:
    return lock_base() / "owners"


def run_folder(run_id: str) -> Path:
    """``lock_root() / run_id``, each level from ``etlstage-<uid>`` (:func:`lock_base`) down
    created or checked as the state directory is (ours, 0700, not a link; refused otherwise)."""
    root = lock_root()
    for level in (root.parent, root, root / run_id):
        ensure_private_dir(level)
    return root / run_id


def open_private(path: Path, flags: int) -> int:
    """A file in a folder of :func:`run_folder`, created 0600; never through a link, never another user's."""
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        hint = " (a symbolic link: refused)" if exc.errno == errno.ELOOP else ""
        raise StateError(f"cannot open {path}{hint}: {exc.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise StateError(f"{path} is not a file of yours (uid {st.st_uid}): refused")
    return fd


def retired_marker(run_id: str) -> Path:
    """Present once the run's query has ended: its idle workers on this host stop."""
    return lock_root() / run_id / "retired"


def retire(run_id: str) -> None:
    """Mark ``run_id`` as ended on this host (see :class:`etlstage.spark.tasks.pool.Registry`)."""
    run_folder(run_id)
    os.close(open_private(retired_marker(run_id), os.O_WRONLY))


class Ownership:
    """The right to run the worker of one (run, stage, partition) on this host."""

    def __init__(self, run_id: str, stage: str, partition: int) -> None:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", stage)
        self.path = lock_root() / run_id / f"{safe}-{partition}.lock"
        self.release_path = self.path.with_suffix(".release")
        self.fd: int | None = None
        self.handed: PassedWorker | None = None  # the running worker the last owner handed over

    @property
    def socket_path(self) -> Path:
        """The hand-over socket, beside the lock; named by a digest so that it fits in a socket
        address (108 bytes) whatever the stage's name."""
        digest = hashlib.sha256(self.path.name.encode()).hexdigest()[:16]
        return self.path.parent / f"h-{digest}.sock"

    @property
    def address(self) -> Rendezvous:
        """Where the next owner waits for the worker, and which process it is (from ``.release``)."""
        try:
            fd = open_private(self.release_path, os.O_RDONLY)
        except StateError:
            return Rendezvous(str(self.socket_path), None)
        try:
            text = os.read(fd, 32).decode(errors="replace").strip()
        finally:
            os.close(fd)
        return Rendezvous(str(self.socket_path), int(text) if text.isdigit() else None)

    def acquire(self, timeout: float, who: str) -> None:
        """Take ownership, asking the current owner to let go (and hand its worker over);
        raise after ``timeout`` seconds."""
        run_folder(self.path.parent.name)
        fd = open_private(self.path, os.O_RDWR)
        deadline = time.monotonic() + timeout
        listener: socket.socket | None = None
        owner: int | None = None  # the pid of the process holding the lock: the only sender accepted
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if listener is None:
                        owner = _owner_pid(fd)
                        listener = self._listen()
                        self._ask()
                    if time.monotonic() >= deadline:
                        raise WorkerError(
                            f"{who}: its worker in another Spark Python process on this host "
                            f"did not hand over within {timeout:g}s"
                        ) from None
                    time.sleep(0.02)
            with contextlib.suppress(FileNotFoundError):
                self.release_path.unlink()
            if listener is not None:
                self.handed = self._receive(listener, owner)
            if self.handed is None:
                self._wait_for_previous(fd, max(0.0, deadline - time.monotonic()), who)
            _write(fd, f"0 0 {os.getpid()}")  # the owner, for a successor's check of the sender
        except BaseException:
            os.close(fd)
            raise
        finally:
            if listener is not None:
                listener.close()
                with contextlib.suppress(FileNotFoundError):
                    self.socket_path.unlink()
        self.fd = fd

    def _ask(self) -> None:
        """The ``.release`` file, holding our pid: the owner hands over to this process only."""
        fd = open_private(self.release_path, os.O_WRONLY)
        try:
            _write(fd, str(os.getpid()))
        finally:
            os.close(fd)

    def _listen(self) -> socket.socket:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(OSError):  # in use: no hand-over, the owner stops its worker
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()  # a last owner's, left by a crash (the folder is ours alone)
            listener.bind(str(self.socket_path))
            listener.listen(1)
        return listener

    @staticmethod
    def _receive(listener: socket.socket, sender: int | None) -> PassedWorker | None:
        """The worker, if the last owner (process ``sender``) sent it before letting go of the
        lock (it did, or never will)."""
        listener.setblocking(False)
        try:
            conn, _ = listener.accept()
        except OSError:
            return None
        with conn:
            conn.settimeout(2.0)
            return PassedWorker.receive(conn, sender)

    def _wait_for_previous(self, fd: int, timeout: float, who: str) -> None:
        """The last owner's worker (pid and start time in the lock file) must have exited."""
        raw = os.pread(fd, 64, 0).split()[:2]
        if len(raw) != 2 or raw[0] == b"0":
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
            _write(self.fd, f"{pid} {psutil.Process(pid).create_time()} {os.getpid()}")

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


def _write(fd: int, text: str) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, text.encode(), 0)


def _owner_pid(fd: int) -> int | None:
    """The pid of the process holding the lock, as it wrote it in the lock file ("worker
    pid, its start time, owner pid"); None if none is there yet."""
    raw = os.pread(fd, 64, 0).split()
    return int(raw[2]) if len(raw) == 3 and raw[2].isdigit() else None


__all__ = [
    "Ownership",
    "PassedWorker",
    "Rendezvous",
    "choose_lock_base",
    "lock_root",
    "open_private",
    "peer_is",
    "retire",
    "retired_marker",
    "run_folder",
]
