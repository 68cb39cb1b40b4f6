"""Transports: the byte pipes between a stage driver and one worker.

:class:`ProcessTransport` spawns a worker program (argv list, never a shell) with its
run instruction in the environment; :class:`InProcessTransport` runs a Python SDK
worker in a thread of this process over OS pipes (no subprocess — the in-memory
harness).  The stage driver speaks the protocol over either the same way.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import fcntl
import logging
import os
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Mapping, Sequence

import psutil

from etlstage.config.model import StageConfig
from etlstage.errors import WorkerError
from etlstage.kit.exits import EXIT_DRAIN, kill_group, pipe_pending
from etlstage.kit.stderr import StderrRelay
from etlstage.kit.stdin_wait import waiting_on_stdin
from etlstage.logs import worker_line, worker_record
from etlstage.protocol.scenario import Scenario
from etlstage.redact import redact_argv

log = logging.getLogger("etlstage.worker")


def worker_env(stage: StageConfig, scenario: Scenario, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker, on either engine: this process's, the run's extras (a
    service's endpoint, log settings), the stage's ``env``, then the run instruction
    (``ETLSTAGE_*``), which nothing overrides."""
    env = dict(os.environ)
    env.update(extra or {})
    env.update(stage.env)
    env.update(scenario.to_env())
    return env


READ_CHUNK = 1 << 20
IOV_MAX = 1024  # the most buffers one writev takes (Linux)
PIPE_SIZE = 1 << 20
F_SETPIPE_SZ = 1031
# stderr lines kept per worker: enough to hold the cause above a long stack trace (a report shows
# the last 10 and quotes the telling line, :mod:`etlstage.kit.telling`)
STDERR_TAIL = 60


def grow_pipe(fd: int) -> None:
    # Bigger pipes mean fewer wake-ups per MB moved; not fatal when refused.
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_SIZE)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no orphan if the supervisor is killed
    except (OSError, AttributeError):
        pass


def _beside_etlstage() -> list[str]:
    """The folders of the running etlstage: its interpreter's (a venv's bin/) and its script's."""
    folders = [os.path.dirname(sys.executable)]
    if os.path.basename(sys.argv[0]) == "etlstage":
        folders.append(os.path.dirname(os.path.abspath(sys.argv[0])))
    return [f for f in dict.fromkeys(folders) if f]


def resolve_program(argv: list[str], env: Mapping[str, str]) -> list[str]:
    """``argv``, its bare program name replaced by the copy beside the running etlstage when not on PATH.

    Running ``/path/to/venv/bin/etlstage`` without activating the venv should still find
    the venv's other console scripts (``etlstage-rdss``...), as a user expects.
    """
    name = argv[0] if argv else ""
    if not name or "/" in name or shutil.which(name, path=os.pathsep.join(os.get_exec_path(dict(env)))):
        return argv
    for folder in _beside_etlstage():
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            log.debug("%r is not on PATH; using %s, beside the running etlstage", name, candidate)
            return [candidate, *argv[1:]]
    return argv


# Interpreters whose first argument that is not an option is a script file, and the
# options after which the program is given inline (no script file to check).
INTERPRETERS = {"python", "python3", "perl", "node", "nodejs", "ruby", "bash", "sh", "dash", "zsh", "php", "Rscript"}
INLINE = {"-c", "-e", "-m", "-E", "--eval", "-r", "--require", "-p", "--print", "-"}


def command_problem(argv: list[str], env: Mapping[str, str], cwd: str) -> str | None:
    """Why ``argv`` cannot start as a run would start it (its program not on the PATH the
    run uses, nor beside etlstage; a script given to a known interpreter missing), or None.

    >>> command_problem(["sh", "no-such-script.sh"], {"PATH": "/bin:/usr/bin"}, "/")
    "script 'no-such-script.sh' (given to sh) does not exist (looked in /)"
    """
    if not argv:
        return None
    program = resolve_program(argv, env)[0]
    path = os.pathsep.join(os.get_exec_path(dict(env)))
    if "/" in program:
        full = program if os.path.isabs(program) else os.path.join(cwd, program)
        if not os.path.isfile(full):
            return f"program {program!r} does not exist (looked in {cwd})"
        if not os.access(full, os.X_OK):
            return f"program {program!r} is not executable"
    elif shutil.which(program, path=path) is None:
        return f"program {program!r} is not on the PATH the run uses ({path})"
    name = os.path.basename(program)
    if name.rstrip("0123456789.") not in INTERPRETERS and name not in INTERPRETERS:
        return None
    for arg in argv[1:]:
        if arg in INLINE or (arg.startswith("-") and arg[:2] in INLINE):
            return None  # the program is given inline, or as a module
        if arg.startswith("-"):
            continue
        if "{" in arg:
            return None  # a placeholder filled in at start
        script = arg if os.path.isabs(arg) else os.path.join(cwd, arg)
        if not os.path.exists(script):
            return f"script {arg!r} (given to {name}) does not exist (looked in {cwd})"
        return None
    return None


def _cwd_problem(cwd: str | None) -> str | None:
    if cwd is None:
        return None
    if not os.path.isdir(cwd):
        return f"its working directory {cwd} does not exist" if not os.path.exists(cwd) else f"{cwd} is not a directory"
    if not os.access(cwd, os.X_OK):
        return f"you may not enter its working directory {cwd}"
    return None


def start_error(exc: OSError | ValueError, argv: list[str], cwd: str | None, label: str) -> WorkerError:
    """Why a worker program could not be started, and the fix."""
    if isinstance(exc, OSError):
        cwd_problem = _cwd_problem(cwd)
        if cwd_problem:
            return WorkerError(
                f"cannot start {label}: {cwd_problem}",
                [
                    f"command: {redact_argv(argv)!r}",
                    "fix: create it, or correct the stage's 'cwd' (relative to the file)",
                ],
            )
    if isinstance(exc, FileNotFoundError):
        return WorkerError(
            f"cannot start {label}: program {argv[0]!r} not found",
            [
                f"command: {redact_argv(argv)!r}",
                f"cwd: {cwd or os.getcwd()}",
                "fix: install it, or give its full path in 'command'",
            ],
        )
    if isinstance(exc, PermissionError):
        return WorkerError(
            f"cannot start {label}: {argv[0]!r} is not executable",
            [
                f"command: {redact_argv(argv)!r}",
                "fix: chmod +x it, or run it through its interpreter (e.g. ['sh', 'x.sh'])",
            ],
        )
    return WorkerError(f"cannot start {label}: {exc}", [f"command: {redact_argv(argv)!r}"])


class Transport:
    """What a stage driver needs from a worker connection."""

    pid: int | None = None
    label: str = ""
    #: when the chunk the last read returned arrived (``time.monotonic()``); None when
    #: unknown: it was already waiting when asked for, so it may have come at any time
    #: since the chunk before it (docs: the rules on confirmation treat that as doubtful)
    last_arrival: float | None = None

    async def write(self, data: bytes) -> None:
        raise NotImplementedError

    async def read(self) -> bytes:
        """A chunk of the worker's stdout; ``b""`` at end of file."""
        raise NotImplementedError

    async def write_all(self, blocks: Sequence[bytes]) -> None:
        """``blocks`` one after the other, as one write where the transport can."""
        for block in blocks:
            await self.write(block)

    def read_now(self, woken: bool = False) -> bytes | None:
        """What :meth:`read` would return at once, taken without waiting (``b""`` at end of
        file); None when it would have to wait.  The default: it would.  ``woken``: the
        caller was woken by its arrival (:meth:`wake_on_output`), so it arrived just now."""
        return None

    def wake_on_output(self, waiter: asyncio.Future[None]) -> bool:
        """Resolve ``waiter`` when output (or its end) arrives, for a reader that waits for
        other things too and then takes it with :meth:`read_now`.  False when this transport
        cannot (the default): the reader waits on :meth:`read` in a task instead."""
        return False

    def close_input(self) -> None:
        raise NotImplementedError

    async def wait(self) -> int:
        raise NotImplementedError

    def returncode(self) -> int | None:
        raise NotImplementedError

    async def stop(self, grace: float = 10.0, term_grace: float = 5.0) -> int | None:
        """Close stdin, wait; SIGTERM, wait; SIGKILL the whole tree.  Returns the exit status."""
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    async def abort(self) -> None:
        """Kill, reap and release the pipes (so nothing is left for after the event loop)."""
        self.kill()

    def stderr_tail(self) -> list[str]:
        return []

    def resources(self) -> tuple[int, float] | None:
        """(RSS bytes, CPU percent) of the worker's process tree, when known."""
        return None

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system) the worker's live process tree has used, when known."""
        return None

    def waiting_for_input(self) -> bool:
        """True when the worker is known to wait for input with none of its output unread:
        it cannot write before it is given some (False when not known)."""
        return False


class _WorkerProtocol(asyncio.SubprocessProtocol):
    """Keeps stdout chunks as the kernel delivered them (no copies), splits stderr into lines."""

    def __init__(self, label: str, tail: collections.deque[str], max_buffered: int) -> None:
        self.label = label
        self.tail = tail
        self.max_buffered = max_buffered
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.eof = False
        self.transport: asyncio.SubprocessTransport | None = None
        self.data_ready: asyncio.Future[None] | None = None
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._paused = False
        self.stderr = StderrRelay(tail, self._show)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def _wake(self) -> None:
        if self.data_ready is not None and not self.data_ready.done():
            self.data_ready.set_result(None)

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            self.chunks.append(data)
            self.buffered += len(data)
            if self.buffered > self.max_buffered and not self._paused and self.transport is not None:
                self._paused = True  # backpressure: the worker blocks on a full pipe
                pipe = self.transport.get_pipe_transport(1)
                if isinstance(pipe, asyncio.ReadTransport):
                    pipe.pause_reading()
            self._wake()
        elif fd == 2:
            self.stderr.feed(data)

    def _show(self, text: str) -> None:
        level, said = worker_line(text)  # a line with its own time and level: shown once, at its level
        log.log(level, "[%s] %s", self.label, said, extra=worker_record(self.label, text))

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self.eof = True
            self._wake()
        elif fd == 2:
            self.stderr.close()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def process_exited(self) -> None:
        code = self.transport.get_returncode() if self.transport is not None else None
        if not self.exited.done():
            self.exited.set_result(code if code is not None else -1)
        self.can_write.set()  # a writer waiting on a dead worker must wake and fail
        self._wake()
        if not self.eof:
            asyncio.get_running_loop().call_later(EXIT_DRAIN, self._drain_over)

    def _drain_over(self) -> None:
        """The worker exited :data:`EXIT_DRAIN` ago and its stdout is still open: a child of
        its holds it.  The group goes (kit.exits); once the pipe is empty and not held back
        by backpressure, the output has ended even if a holder outside the group remains."""
        if self.eof or self.transport is None:
            return
        kill_group(self.transport.get_pid())
        pipe = self.transport.get_pipe_transport(1)
        fd = pipe.get_extra_info("pipe").fileno() if pipe is not None else None
        if pipe is None or (not self._paused and (fd is None or pipe_pending(fd) == 0)):
            log.debug("%s exited; its stdout was still held open: its process group was killed", self.label)
            if pipe is not None:
                pipe.close()  # pipe_connection_lost follows: the end of its output
            self.eof = True
            self._wake()
        else:  # what it wrote before it exited is still being read
            asyncio.get_running_loop().call_later(EXIT_DRAIN, self._drain_over)

    def take(self) -> bytes:
        chunk = self.chunks.popleft()
        self.buffered -= len(chunk)
        if self._paused and self.buffered <= self.max_buffered // 2 and self.transport is not None:
            self._paused = False
            pipe = self.transport.get_pipe_transport(1)
            if isinstance(pipe, asyncio.ReadTransport):
                pipe.resume_reading()
        return chunk


class ProcessTransport(Transport):
    def __init__(
        self,
        transport: asyncio.SubprocessTransport,
        protocol: _WorkerProtocol,
        argv: list[str],
        label: str,
        tail: collections.deque[str],
    ) -> None:
        self._transport = transport
        self._protocol = protocol
        self.pid = transport.get_pid()
        self.argv = argv
        self.label = label
        self._tail = tail
        try:
            self._ps: psutil.Process | None = psutil.Process(self.pid)
        except psutil.Error:
            self._ps = None
        self._measured: dict[int, psutil.Process] = {}

    @classmethod
    async def spawn(cls, argv: list[str], env: dict[str, str], cwd: str | None, label: str) -> ProcessTransport:
        loop = asyncio.get_running_loop()
        tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        argv = resolve_program(argv, env)
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: _WorkerProtocol(label, tail, 4 * READ_CHUNK),
                *argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        except (OSError, ValueError) as exc:
            raise start_error(exc, argv, cwd, label) from None
        for fd in (0, 1):
            with contextlib.suppress(AttributeError, ValueError, OSError):
                pipe = transport.get_pipe_transport(fd)
                if pipe is not None:
                    grow_pipe(pipe.get_extra_info("pipe").fileno())
        stdin = transport.get_pipe_transport(0)
        if isinstance(stdin, asyncio.WriteTransport):
            stdin.set_write_buffer_limits(high=4 * READ_CHUNK)
        return cls(transport, protocol, argv, label, tail)

    async def write(self, data: bytes) -> None:
        await self.write_all((data,))

    async def write_all(self, blocks: Sequence[bytes]) -> None:
        """One ``writev`` while nothing else waits to be written (a job's blocks and its EOB
        reach the worker in one wake-up, with no copy); what the pipe does not take, and
        everything when something waits already, goes through the event loop's transport."""
        stdin = self._transport.get_pipe_transport(0)
        if not isinstance(stdin, asyncio.WriteTransport) or stdin.is_closing():
            raise BrokenPipeError("the worker's stdin is closed")
        written = 0
        if stdin.get_write_buffer_size() == 0 and 1 < len(blocks) <= IOV_MAX:
            # a full pipe writes nothing here; any other error the transport's own write below
            # meets again and reports its way (a worker gone: the connection is lost)
            with contextlib.suppress(OSError):
                written = os.writev(stdin.get_extra_info("pipe").fileno(), blocks)
        for block in blocks:
            if written >= len(block):
                written -= len(block)
                continue
            stdin.write(memoryview(block)[written:] if written else block)
            written = 0
        if not self._protocol.can_write.is_set():
            await self._protocol.can_write.wait()
            if self._protocol.exited.done():
                raise BrokenPipeError("the worker exited")

    async def read(self) -> bytes:
        p = self._protocol
        waited = False
        while not p.chunks:
            if p.eof:
                return b""
            p.data_ready = asyncio.get_running_loop().create_future()
            await p.data_ready
            waited = True
        # Seen arriving only if this read waited for it; a chunk already queued (while the
        # reader was busy, or held back by backpressure) may have come at any time since.
        self.last_arrival = time.monotonic() if waited else None
        return p.take()

    def wake_on_output(self, waiter: asyncio.Future[None]) -> bool:
        self._protocol.data_ready = waiter
        return True

    def read_now(self, woken: bool = False) -> bytes | None:
        p = self._protocol
        if p.chunks:
            # as in read: seen arriving only when woken by it; queued already, it may have
            # come at any time since the chunk before it
            self.last_arrival = time.monotonic() if woken else None
            return p.take()
        return b"" if p.eof else None

    def close_input(self) -> None:
        stdin = self._transport.get_pipe_transport(0)
        if stdin is not None and not stdin.is_closing():
            with contextlib.suppress(Exception):
                stdin.close()

    def waiting_for_input(self) -> bool:
        # Its tree blocked on its stdin first: from then on it writes nothing, so what it
        # wrote before is in the pipe or in ``chunks`` (the event loop cannot run meanwhile).
        stdin, stdout = self._transport.get_pipe_transport(0), self._transport.get_pipe_transport(1)
        if self.pid is None or stdin is None or stdout is None or self._protocol.eof:
            return False
        try:
            if not waiting_on_stdin(self.pid, stdin.get_extra_info("pipe").fileno()):
                return False
            unread = fcntl.ioctl(stdout.get_extra_info("pipe").fileno(), termios.FIONREAD, b"\0\0\0\0")
        except (AttributeError, ValueError, OSError):
            return False
        return not self._protocol.chunks and struct.unpack("i", unread)[0] == 0

    async def wait(self) -> int:
        return await asyncio.shield(self._protocol.exited)

    def returncode(self) -> int | None:
        return self._transport.get_returncode()

    async def stop(self, grace: float = 10.0, term_grace: float = 5.0) -> int | None:
        try:
            return await self._stop(grace, term_grace)
        finally:
            self._transport.close()  # release the pipes while the event loop still runs

    async def _stop(self, grace: float, term_grace: float) -> int | None:
        self.close_input()
        try:
            code = await asyncio.wait_for(self.wait(), grace)
            kill_group(self.pid)  # what it started goes with it (docs/protocol.md: no orphans)
            return code
        except TimeoutError:
            pass
        log.warning("%s (pid %s) did not exit %.0fs after stdin closed; sending SIGTERM", self.label, self.pid, grace)
        self._signal_tree(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.wait(), term_grace)
        except TimeoutError:
            log.warning(
                "%s (pid %s) ignored SIGTERM for %.0fs; killing its process tree", self.label, self.pid, term_grace
            )
        self.kill()
        code = await self.wait()
        kill_group(self.pid)
        return code

    def _tree(self) -> list[psutil.Process]:
        if self._ps is None:
            return []
        try:
            return [self._ps, *self._ps.children(recursive=True)]
        except psutil.Error:
            return []

    def _signal_tree(self, sig: int) -> None:
        for p in self._tree():
            with contextlib.suppress(psutil.Error):
                p.send_signal(sig)

    def kill(self) -> None:
        tree = self._tree()
        for p in tree:
            with contextlib.suppress(psutil.Error):
                p.kill()
        kill_group(self.pid)  # and a child whose parent exited already (no longer in the tree)
        if not tree and self._transport.get_returncode() is None:
            with contextlib.suppress(ProcessLookupError):
                self._transport.kill()

    async def abort(self) -> None:
        self.kill()
        with contextlib.suppress(asyncio.TimeoutError, Exception):
            await asyncio.wait_for(self.wait(), 5.0)
        self._transport.close()

    def stderr_tail(self) -> list[str]:
        return list(self._tail)

    def _measured_tree(self) -> list[psutil.Process]:
        """The tree, with the same Process object for a pid each time: ``cpu_percent(None)``
        measures since that object's previous call, so a fresh object would always say 0."""
        self._measured = {p.pid: self._measured.get(p.pid, p) for p in self._tree()}
        return list(self._measured.values())

    def resources(self) -> tuple[int, float] | None:
        rss, cpu = 0, 0.0
        tree = self._measured_tree()
        if not tree:
            return None
        for p in tree:
            with contextlib.suppress(psutil.Error):
                rss += p.memory_info().rss
                cpu += p.cpu_percent(None)
        return rss, cpu

    def cpu_seconds(self) -> float | None:
        total = 0.0
        # the tree resources() found last (at most a second ago): walking /proc again costs more
        tree = list(self._measured.values()) or self._tree()
        if not tree:
            return None
        for p in tree:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
        return total
