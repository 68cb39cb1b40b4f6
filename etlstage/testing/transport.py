"""An in-memory transport: a Python SDK worker run in a thread of this process, over OS
pipes, with the same interface as a worker process.  The harness uses it so a worker's unit
tests need no subprocess at all."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from etlstage.kit.transport import READ_CHUNK, STDERR_TAIL, Transport, grow_pipe

log = logging.getLogger("etlstage.worker")


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
            grow_pipe(fd)
        self._in_w = in_w
        self._out_r = out_r
        self._code: int | None = None
        self._tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self._loop = asyncio.get_running_loop()
        self._finished: asyncio.Future[int] = self._loop.create_future()
        self._reader: asyncio.StreamReader | None = None
        self._writer_transport: asyncio.WriteTransport | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._setup: asyncio.Future[None] | None = None
        self._killed = False  # its pipes were cut: an error on them is that, not the worker's

        def run() -> None:
            stdin = os.fdopen(in_r, "rb", buffering=0)
            stdout = os.fdopen(out_w, "wb", buffering=READ_CHUNK)
            code = 1
            try:
                code = target(stdin, stdout)
            except BaseException as exc:
                if self._killed and isinstance(exc, OSError):
                    log.debug("[%s] worker stopped by its cut pipes: %s", label, exc)
                else:
                    self._tail.append(f"{type(exc).__name__}: {exc}")
                    log.error("[%s] worker raised %s: %s", label, type(exc).__name__, exc)
                code = 1
            finally:
                with contextlib.suppress(OSError):
                    stdout.close()
                with contextlib.suppress(OSError):
                    stdin.close()
                self._code = code
                with contextlib.suppress(RuntimeError):  # the harness's event loop has ended already
                    self._loop.call_soon_threadsafe(self._set_finished, code)

        self._thread = threading.Thread(target=run, name=f"worker-{label}", daemon=True)
        self._thread.start()

    def _set_finished(self, code: int) -> None:
        if not self._finished.done():
            self._finished.set_result(code)

    async def _ensure_streams(self) -> None:
        """Connect the pipes once; a reader and a writer may both ask at the same time."""
        if self._setup is None:
            self._setup = asyncio.ensure_future(self._connect())
        await asyncio.shield(self._setup)

    async def _connect(self) -> None:
        if self._reader is None:
            loop = asyncio.get_running_loop()
            reader = self._reader = asyncio.StreamReader(limit=4 * READ_CHUNK)
            await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(self._out_r, "rb", buffering=0)
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
        self._killed = True
        self.close_input()
        if self._reader is not None and self._reader._transport is not None:  # type: ignore[attr-defined]
            self._reader._transport.close()  # type: ignore[attr-defined]

    def stderr_tail(self) -> list[str]:
        return list(self._tail)
