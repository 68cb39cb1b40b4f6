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
import signal
import threading
from collections.abc import Callable
from typing import Any

import psutil

from etlstage.errors import WorkerError

log = logging.getLogger("etlstage.worker")

READ_CHUNK = 1 << 20
PIPE_SIZE = 1 << 20
F_SETPIPE_SZ = 1031
STDERR_TAIL = 20


def _grow_pipe(fd: int) -> None:
    # Bigger pipes mean fewer wake-ups per MB moved; not fatal when refused.
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_SIZE)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no orphan if the supervisor is killed
    except (OSError, AttributeError):
        pass


class Transport:
    """What a stage driver needs from a worker connection."""

    pid: int | None = None
    label: str = ""

    async def write(self, data: bytes) -> None:
        raise NotImplementedError

    async def read(self) -> bytes:
        """A chunk of the worker's stdout; ``b""`` at end of file."""
        raise NotImplementedError

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


class ProcessTransport(Transport):
    def __init__(self, proc: asyncio.subprocess.Process, argv: list[str], label: str) -> None:
        self._proc = proc
        self.pid = proc.pid
        self.argv = argv
        self.label = label
        self._tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self._stderr_task = asyncio.ensure_future(self._pump_stderr())
        try:
            self._ps: psutil.Process | None = psutil.Process(proc.pid)
        except psutil.Error:
            self._ps = None

    @classmethod
    async def spawn(cls, argv: list[str], env: dict[str, str], cwd: str | None, label: str) -> ProcessTransport:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent,
                limit=4 * READ_CHUNK,
            )
        except FileNotFoundError:
            raise WorkerError(
                f"cannot start {label}: program {argv[0]!r} not found",
                [
                    f"command: {argv!r}",
                    f"cwd: {cwd or os.getcwd()}",
                    "fix: install it, or give its full path in 'command'",
                ],
            ) from None
        except PermissionError:
            raise WorkerError(
                f"cannot start {label}: {argv[0]!r} is not executable",
                [f"command: {argv!r}", "fix: chmod +x it, or run it through its interpreter (e.g. ['sh', 'x.sh'])"],
            ) from None
        except (OSError, ValueError) as exc:
            raise WorkerError(f"cannot start {label}: {exc}", [f"command: {argv!r}"]) from None
        for fd in (0, 1):
            with contextlib.suppress(AttributeError, ValueError, OSError):
                pipe = proc._transport.get_pipe_transport(fd).get_extra_info("pipe")  # type: ignore[attr-defined]
                _grow_pipe(pipe.fileno())
        return cls(proc, argv, label)

    async def _pump_stderr(self) -> None:
        """Drain stderr from the start (a full pipe must never stall a worker) into the log."""
        stream = self._proc.stderr
        assert stream is not None
        pending = b""
        while True:
            chunk = await stream.read(65536)
            if not chunk:
                break
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            if len(pending) > 8192:  # a line with no end: show it in pieces
                lines.append(pending)
                pending = b""
            for raw in lines:
                self._line(raw)
        if pending:
            self._line(pending)

    def _line(self, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\r")
        self._tail.append(text)
        log.info("[%s] %s", self.label, text)

    async def write(self, data: bytes) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        stdin.write(data)
        await stdin.drain()

    async def read(self) -> bytes:
        stdout = self._proc.stdout
        assert stdout is not None
        return await stdout.read(READ_CHUNK)

    def close_input(self) -> None:
        stdin = self._proc.stdin
        if stdin is not None and not stdin.is_closing():
            with contextlib.suppress(Exception):
                stdin.close()

    async def wait(self) -> int:
        code = await self._proc.wait()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self._stderr_task), 2.0)
        return code

    def returncode(self) -> int | None:
        return self._proc.returncode

    async def stop(self, grace: float = 10.0, term_grace: float = 5.0) -> int | None:
        self.close_input()
        try:
            return await asyncio.wait_for(self.wait(), grace)
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
        return await self.wait()

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
        if not tree and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()

    async def abort(self) -> None:
        self.kill()
        try:
            await asyncio.wait_for(self.wait(), 5.0)
        except (TimeoutError, Exception):
            pass
        transport = getattr(self._proc, "_transport", None)
        if transport is not None:
            transport.close()

    def stderr_tail(self) -> list[str]:
        return list(self._tail)

    def resources(self) -> tuple[int, float] | None:
        rss, cpu = 0, 0.0
        tree = self._tree()
        if not tree:
            return None
        for p in tree:
            with contextlib.suppress(psutil.Error):
                rss += p.memory_info().rss
                cpu += p.cpu_percent(None)
        return rss, cpu


class InProcessTransport(Transport):
    """A Python SDK worker run in a thread of this process, over OS pipes.

    ``target(stdin, stdout)`` is called in the thread with binary file objects and
    returns the exit status.  Used by the in-memory harness: no subprocess at all.
    """

    def __init__(self, target: Callable[[Any, Any], int], label: str) -> None:
        self.label = label
        self.pid = os.getpid()
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        for fd in (in_w, out_w):
            _grow_pipe(fd)
        self._in_w = in_w
        self._out_r = out_r
        self._code: int | None = None
        self._done = threading.Event()
        self._tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self._loop = asyncio.get_running_loop()
        self._finished: asyncio.Future[int] = self._loop.create_future()
        self._reader: asyncio.StreamReader | None = None
        self._writer_transport: asyncio.WriteTransport | None = None
        self._writer: asyncio.StreamWriter | None = None

        def run() -> None:
            stdin = os.fdopen(in_r, "rb", buffering=0)
            stdout = os.fdopen(out_w, "wb", buffering=READ_CHUNK)
            code = 1
            try:
                code = target(stdin, stdout)
            except BaseException as exc:
                self._tail.append(f"{type(exc).__name__}: {exc}")
                log.error("[%s] worker raised %s: %s", label, type(exc).__name__, exc)
                code = 1
            finally:
                with contextlib.suppress(OSError):
                    stdout.close()
                with contextlib.suppress(OSError):
                    stdin.close()
                self._code = code
                self._loop.call_soon_threadsafe(self._set_finished, code)

        self._thread = threading.Thread(target=run, name=f"worker-{label}", daemon=True)
        self._thread.start()

    def _set_finished(self, code: int) -> None:
        if not self._finished.done():
            self._finished.set_result(code)

    async def _ensure_streams(self) -> None:
        if self._reader is None:
            loop = asyncio.get_running_loop()
            self._reader = asyncio.StreamReader(limit=4 * READ_CHUNK)
            await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(self._reader), os.fdopen(self._out_r, "rb", buffering=0)
            )
            wt, wp = await loop.connect_write_pipe(
                asyncio.streams.FlowControlMixin, os.fdopen(self._in_w, "wb", buffering=0)
            )
            self._writer_transport = wt
            self._writer = asyncio.StreamWriter(wt, wp, None, loop)

    async def write(self, data: bytes) -> None:
        await self._ensure_streams()
        assert self._writer is not None
        self._writer.write(data)
        await self._writer.drain()

    async def read(self) -> bytes:
        await self._ensure_streams()
        assert self._reader is not None
        return await self._reader.read(READ_CHUNK)

    def close_input(self) -> None:
        if self._writer_transport is not None:
            if not self._writer_transport.is_closing():
                self._writer_transport.close()
        else:
            with contextlib.suppress(OSError):
                os.close(self._in_w)
            self._in_w = -1

    async def wait(self) -> int:
        return await asyncio.shield(self._finished)

    def returncode(self) -> int | None:
        return self._code

    async def stop(self, grace: float = 10.0, term_grace: float = 5.0) -> int | None:
        self.close_input()
        try:
            return await asyncio.wait_for(self.wait(), grace + term_grace)
        except TimeoutError:
            log.warning("%s: in-process worker did not finish after stdin closed; abandoning its thread", self.label)
            return None

    def kill(self) -> None:
        # A thread cannot be killed: cut its pipes so it ends at its next read or write.
        self.close_input()
        if self._reader is not None and self._reader._transport is not None:  # type: ignore[attr-defined]
            self._reader._transport.close()  # type: ignore[attr-defined]

    def stderr_tail(self) -> list[str]:
        return list(self._tail)
