"""Worker processes inside Spark's Python processes: spawn, blocking-free pipes, watchdog.

A Spark task is plain synchronous Python, so a worker here is driven without an event
loop: :class:`WorkerProcess` moves bytes with ``select`` over non-blocking pipes (a
worker that writes while it reads never dead-locks against us), drains stderr in a
thread from the moment it starts, and dies with the Python process that started it
(see :mod:`etlstage.spark.tasks.watchdog`), so no orphan survives an executor.

The pool that keeps them across tasks is :mod:`etlstage.spark.tasks.pool`.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time

import psutil

from etlstage.errors import WorkerGone, WorkerTimeout, describe_status, stdin_broke, went_away
from etlstage.kit.exits import EXIT_DRAIN, kill_group, pipe_pending
from etlstage.kit.stderr import StderrRelay
from etlstage.kit.stdin_wait import waiting_on_stdin
from etlstage.kit.telling import report_context, worker_gone
from etlstage.kit.transport import READ_CHUNK, STDERR_TAIL, grow_pipe, resolve_program, start_error
from etlstage.spark.tasks.ownership import PassedWorker, Rendezvous, peer_is

log = logging.getLogger("etlstage.spark.worker")


class WorkerProcess:
    """One worker program, driven synchronously by a task."""

    def __init__(
        self, argv: list[str], env: dict[str, str], cwd: str | None, label: str, handed: PassedWorker | None = None
    ) -> None:
        """Start ``argv``; or, with ``handed``, take over the running worker another Spark
        Python process on this host handed over (see :meth:`hand_over`)."""
        self.label = label
        self.broken_stdin_if_exited: str | None = None  # see went_away; set by its owner
        self.tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self.proc: subprocess.Popen[bytes] | Foreign
        if handed is not None:
            self.argv = argv
            self.proc = Foreign(handed)
            self.tail.extend(handed.tail)
        else:
            self.argv = argv = resolve_program(argv, env)
            try:
                self.proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=env,
                    cwd=cwd,
                    start_new_session=True,  # Spark's SIGHUP to its workers' group is ours to relay
                )
            except (OSError, ValueError) as exc:
                raise start_error(exc, argv, cwd, f"{label} on {socket.gethostname()}") from None
        self.pid = self.proc.pid
        _watch(self.pid)
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        self._in = self.proc.stdin.fileno()
        self._out = self.proc.stdout.fileno()
        for fd in (self._in, self._out):
            os.set_blocking(fd, False)
            grow_pipe(fd)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._out, selectors.EVENT_READ)
        self._exit_fd = _pidfd(self.pid)  # readable once the worker exits: the select wakes then
        if self._exit_fd is not None:
            self._sel.register(self._exit_fd, selectors.EVENT_READ)
        self._drain_until: float | None = None  # set when it exited: see kit.exits
        self._writing = False
        self.eof = False
        self.stdin_closed = False
        self.last_output = time.monotonic()
        self.last_arrival: float | None = None  # when the output the last pump read arrived (None: unseen)
        self._detaching = threading.Event()
        self._stderr = threading.Thread(target=self._drain_stderr, name=f"stderr {label}", daemon=True)
        self._stderr.start()

    # --- output of the worker ---------------------------------------------------------------

    def _drain_stderr(self) -> None:
        """Relay the worker's stderr line by line, until it closes (or the worker is handed over)."""
        assert self.proc.stderr is not None
        fd = self.proc.stderr.fileno()
        relay = StderrRelay(self.tail, lambda text: print(f"[{self.label}] {text}", file=sys.stderr, flush=True))
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while not self._detaching.is_set():
                if not sel.select(0.05):
                    continue
                try:
                    chunk = os.read(fd, READ_CHUNK)
                except OSError:
                    chunk = b""
                if not chunk:
                    relay.close()
                    return
                relay.feed(chunk)

    def context(self, snippet: bytes = b"") -> list[str]:
        """Stage, host, pid, exit status, bytes and stderr tail: a report that stands alone."""
        time.sleep(0.05)  # let the stderr thread catch the worker's last words
        return report_context(
            f"{self.label} on executor host {socket.gethostname()}",
            self.argv,
            self.pid,
            self.status(),
            snippet,
            list(self.tail),
        )

    def returncode(self) -> int | None:
        """Its exit status (negative: a signal); None while it runs, or when it cannot be
        known (a handed-over worker, another process's child)."""
        return None if isinstance(self.proc, Foreign) else self.proc.poll()

    def waiting_for_input(self) -> bool:
        """True when the worker is known to wait for input with none of its output unread:
        it cannot write before it is given some (False when not known)."""
        if self.eof or isinstance(self.proc, Foreign):
            return False
        return waiting_on_stdin(self.pid, self._in) and pipe_pending(self._out) == 0

    def status(self) -> str:
        code = self.proc.poll()
        if isinstance(self.proc, Foreign) and code is not None:
            return "unknown (it was started by another Spark Python process)"
        return describe_status(code)

    def gone(self, what: str, if_exited: str | None = None) -> WorkerGone:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(2.0)
        if if_exited is not None:  # the supervisor's wording (went_away); Spark's own messages stay as they are
            what = went_away(what, self.proc.returncode, if_exited)
        context = self.context()  # first: it waits for the worker's last words
        return worker_gone(f"{self.label} {what}", self.tail, context)

    # --- moving bytes ------------------------------------------------------------------------

    def pump(self, pending: collections.deque[memoryview], deadline: float | None, what: str | None) -> list[bytes]:
        """Write as much of ``pending`` as the worker takes; return what it wrote meanwhile.

        Returns as soon as output arrived or some input was written.  At ``deadline``
        it raises :class:`WorkerTimeout` naming the limit ``what`` (or, with ``what``
        None, returns nothing); a broken pipe raises :class:`WorkerGone`.
        """
        want_write = bool(pending)
        if want_write != self._writing:
            if want_write:
                self._sel.register(self._in, selectors.EVENT_WRITE)
            else:
                self._sel.unregister(self._in)
            self._writing = want_write
        # Output seen arriving only if this call waited for it: output already there may
        # have come at any time since the last call (the rules on confirmation: policy.Pace).
        ready = self._sel.select(0)
        events = ready
        while not events:
            wake = self._exit_check(deadline)
            if self.eof:
                return []
            timeout = None if wake is None else max(0.0, wake - time.monotonic())
            events = self._sel.select(timeout)
            if not events and (deadline is None or time.monotonic() < deadline):
                continue  # only the exit's check was due
            break
        self.last_arrival = None if ready else time.monotonic()
        if not events:
            if what is not None and deadline is not None and time.monotonic() >= deadline:
                raise WorkerTimeout(f"{self.label} did not answer within its {what}", self.context())
            return []
        chunks: list[bytes] = []
        for key, mask in events:
            if key.fd == self._exit_fd:
                self._exited()
            elif key.fd == self._in and mask & selectors.EVENT_WRITE:
                self._write_some(pending)
            elif key.fd == self._out:
                chunk = self._read_some()
                if chunk:
                    chunks.append(chunk)
        return chunks

    def _exited(self) -> None:
        """The worker process ended: its output ends within :data:`EXIT_DRAIN` (kit.exits)."""
        if self._exit_fd is not None:
            self._sel.unregister(self._exit_fd)
            self._close_exit_fd()
        if self._drain_until is None:
            self._drain_until = time.monotonic() + EXIT_DRAIN

    def _exit_check(self, deadline: float | None) -> float | None:
        """When the select must wake next (``deadline``, or earlier for the exit's drain);
        past the drain, with the pipe empty, the output has ended (``eof``)."""
        if self._drain_until is None and self._exit_fd is None and self.proc.poll() is not None:
            self._exited()  # no pidfd here: polled
        if self._drain_until is None:
            poll = None if self._exit_fd is not None else time.monotonic() + 0.5
            return poll if deadline is None else min(deadline, poll or deadline)
        now = time.monotonic()
        if now >= self._drain_until and not self.eof:
            kill_group(self.pid)  # a child holding its stdout; what it started goes with it
            if pipe_pending(self._out) == 0:
                log.debug("%s exited; its stdout was still held open: its process group was killed", self.label)
                self.eof = True
                self._sel.unregister(self._out)
                return deadline
            self._drain_until = now + EXIT_DRAIN  # what it wrote before it exited is read first
        return self._drain_until if deadline is None else min(deadline, self._drain_until)

    def _write_some(self, pending: collections.deque[memoryview]) -> None:
        while pending:
            head = pending[0]
            try:
                n = os.write(self._in, head)
            except BlockingIOError:
                return
            except (BrokenPipeError, OSError) as exc:
                raise self.gone(stdin_broke(exc), self.broken_stdin_if_exited) from None
            if n == len(head):
                pending.popleft()
            else:
                pending[0] = head[n:]
                return

    def _read_some(self) -> bytes:
        try:
            chunk = os.read(self._out, READ_CHUNK)
        except BlockingIOError:
            return b""
        if not chunk:
            self.eof = True
            self._sel.unregister(self._out)
            return b""
        self.last_output = time.monotonic()
        return chunk

    # --- ending --------------------------------------------------------------------------------

    def close_input(self) -> None:
        if not self.stdin_closed:
            self.stdin_closed = True
            if self._writing:
                self._sel.unregister(self._in)
                self._writing = False
            with contextlib.suppress(OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()

    def stop(self, grace: float) -> int | None:
        """Close stdin, wait; SIGTERM, wait; SIGKILL the tree.  The exit status."""
        self.close_input()
        for sig, wait in ((None, grace), (signal.SIGTERM, 5.0)):
            if sig is not None:
                log.warning(
                    "%s (pid %s) did not exit %.0fs after stdin closed; sending SIGTERM", self.label, self.pid, grace
                )
                self._signal_tree(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self.proc.wait(wait)
                kill_group(self.pid)  # what it started goes with it (docs/protocol.md: no orphans)
                return code
        self.kill()
        return self.proc.returncode

    def _signal_tree(self, sig: int) -> None:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.pid)
            for p in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    p.send_signal(sig)

    def hand_over(self, address: Rendezvous) -> bool:
        """Pass this running worker's pipes to the Spark Python process waiting at ``address``
        and let go of it here; False (nothing changed) when nobody waits there, or when the
        listener is not the process that asked (another user's, or another pid)."""
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        try:
            create_time = psutil.Process(self.pid).create_time()
        except psutil.Error:
            return False
        note = json.dumps({"pid": self.pid, "create_time": create_time, "tail": list(self.tail)[-20:]}).encode()
        fds = [self.proc.stdin.fileno(), self.proc.stdout.fileno(), self.proc.stderr.fileno()]
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(2.0)
                sock.connect(address.path)
                if not peer_is(sock, address.pid):
                    log.warning(
                        "%s: the hand-over socket %s is not the asking process's: not handed over",
                        self.label,
                        address.path,
                    )
                    return False
                socket.send_fds(sock, [note], fds)
        except OSError:
            return False
        self._detaching.set()
        self._stderr.join(1.0)
        _unwatch(self.pid)
        self._sel.close()
        self._close_exit_fd()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(OSError):
                f.close()
        if isinstance(self.proc, subprocess.Popen):
            _HANDED.append(self.proc)  # reaped later here (it is still our child), never waited for
        return True

    def kill(self) -> None:
        self._signal_tree(signal.SIGKILL)
        kill_group(self.pid)  # and a child whose parent exited already (no longer in the tree)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5.0)
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if f is not None:
                    f.close()
        self._sel.close()
        self._close_exit_fd()

    def _close_exit_fd(self) -> None:
        if self._exit_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._exit_fd)
            self._exit_fd = None


class Foreign:
    """A handed-over worker: running, but the child of another process, so its exit is seen
    (gone, or a zombie nobody reaped yet) and its exit status is not known."""

    UNKNOWN = 0

    def __init__(self, handed: PassedWorker) -> None:
        self.pid = handed.pid
        self._process = psutil.Process(handed.pid)
        self.stdin = os.fdopen(handed.stdin, "wb", buffering=0)
        self.stdout = os.fdopen(handed.stdout, "rb", buffering=0)
        self.stderr = os.fdopen(handed.stderr, "rb", buffering=0)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                running = self._process.is_running() and self._process.status() != psutil.STATUS_ZOMBIE
            except psutil.Error:
                running = False
            if not running:
                self.returncode = self.UNKNOWN
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(0.01)
        return self.UNKNOWN

    def kill(self) -> None:
        with contextlib.suppress(psutil.Error):
            self._process.kill()


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when process ``pid`` exits (Linux 5.3+), or None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


_HANDED: list[subprocess.Popen[bytes]] = []  # workers handed over: kept so they are reaped, not waited for
_watchdog: dict[int, subprocess.Popen[bytes]] = {}  # by the pid of the Python process it watches
WATCHDOG_GRACE = 10.0


def _watch(pid: int) -> None:
    """Tell this Python process's watchdog about a new worker (starting the watchdog once)."""
    me = os.getpid()
    dog = _watchdog.get(me)
    if dog is None or dog.poll() is not None:
        dog = subprocess.Popen(
            [sys.executable, "-m", "etlstage.spark.tasks.watchdog", str(WATCHDOG_GRACE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        _watchdog[me] = dog
    assert dog.stdin is not None
    with contextlib.suppress(psutil.Error, OSError):
        dog.stdin.write(f"{pid} {psutil.Process(pid).create_time()}\n".encode())
        dog.stdin.flush()
    for old in list(_HANDED):  # reap what was handed over and has exited meanwhile
        if old.poll() is not None:
            _HANDED.remove(old)


def _unwatch(pid: int) -> None:
    """The worker was handed over: this Python process's end no longer ends it."""
    dog = _watchdog.get(os.getpid())
    if dog is None or dog.stdin is None:
        return
    with contextlib.suppress(OSError):
        dog.stdin.write(f"forget {pid}\n".encode())
        dog.stdin.flush()


__all__ = ["WATCHDOG_GRACE", "WorkerProcess"]
