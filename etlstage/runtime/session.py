"""One conversation with one worker: write requests, read replies, enforce time limits.

A :class:`WorkerSession` owns a transport and the process's :class:`Conversation` (the
state machine both engines share: bytes to tokens to answered requests, time limits,
the start-up quiet).  It turns
everything that can go wrong with a worker — a broken pipe, an early exit, a timeout,
bytes the protocol does not allow — into one :class:`WorkerError` that names the stage,
the command, the pid, the exit status, an escaped snippet and the stderr tail.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Sequence
from typing import Any

from etlstage.config.model import Timeouts
from etlstage.conversation import policy
from etlstage.conversation.machine import Conversation
from etlstage.errors import (
    PipelineError,
    ProtocolViolation,
    WorkerError,
    WorkerGone,
    WorkerTimeout,
    describe_status,
    stdin_broke,
    went_away,
)
from etlstage.kit.telling import broken_command, report_context, worker_gone
from etlstage.kit.transport import Transport
from etlstage.protocol.framing import Token
from etlstage.protocol.scenario import Scenario
from etlstage.protocol.vocabulary import StageType
from etlstage.runtime.flow import Job


class WorkerSession:
    def __init__(
        self,
        transport: Transport,
        scenario: Scenario,
        label: str,
        argv: list[str],
        timeouts: Timeouts,
        max_message_bytes: int,
    ) -> None:
        self.transport = transport
        self.scenario = scenario
        self.label = label
        self.argv = argv
        self.timeouts = timeouts
        self.conv: Conversation[Job] = Conversation(
            scenario, timeouts, max_message_bytes, results=scenario.type == StageType.T, started=time.monotonic()
        )
        self.inflight: collections.deque[Job] = self.conv.outstanding
        self.quiet_until: float | None = None  # with nothing outstanding: read_tokens returns [] then
        self.tokens_arrived: float | None = None  # when the tokens read last arrived (None: unknown)
        self._read: asyncio.Future[bytes] | None = None  # a read in a task (a transport that cannot wake)
        self._rearm = asyncio.Event()
        self._woken: asyncio.Future[None] | None = None  # resolved by output, or by a request written
        self._rearmed = False  # ... by a request written

    # --- errors ---------------------------------------------------------------------

    def context(self, snippet: bytes = b"") -> list[str]:
        sc = self.scenario
        batching = f", batch_size {sc.batch_size}, {sc.batch_driver}-driven" if sc.is_batch else ""
        return report_context(
            f"{self.label} ({sc.type}-stage, mode {sc.mode}{batching})",
            self.argv,
            self.transport.pid,
            describe_status(self.transport.returncode()),
            snippet,
            self.transport.stderr_tail(),
        )

    def violation(self, exc: ProtocolViolation) -> WorkerError:
        """The report of ``exc``; it stays the ``__cause__`` (an :class:`UnaskedReply` shows a shift)."""
        error = WorkerError(f"protocol violation by {self.label}: {exc.problem}", self.context(exc.snippet))
        error.__cause__ = exc
        return error

    async def gone(self, what: str, if_exited: str | None = None) -> WorkerGone:
        """The worker went away: wait briefly for its exit status so the report has it
        (:func:`~etlstage.errors.went_away` words it)."""
        try:
            async with asyncio.timeout(2.0):
                await self.transport.wait()
        except TimeoutError:
            pass
        headline = f"{self.label} {went_away(what, self.transport.returncode(), if_exited)}"
        return worker_gone(headline, self.transport.stderr_tail(), self.context())

    def broken_command(self, exc: WorkerError) -> PipelineError | None:
        """``exc`` shows a broken command, not a bad message (:meth:`Conversation.broken`:
        it exited on its own before its first request, and no process of its instance
        answered): the error that stops the stage; else None."""
        if not self.conv.broken(exc, self.transport.returncode()):
            return None
        return broken_command(self.label, self.transport.stderr_tail(), exc)

    # --- I/O ------------------------------------------------------------------------

    async def write(self, data: bytes, if_exited: str | None = None) -> None:
        """``if_exited``: what a broken pipe means when the worker turns out to have exited on its own."""
        await self.write_all((data,), if_exited)

    async def write_all(self, blocks: Sequence[bytes], if_exited: str | None = None) -> None:
        """``blocks`` in order, as one write where the transport can (a job and its EOB)."""
        try:
            await self.transport.write_all(blocks)
        except (BrokenPipeError, ConnectionResetError, RuntimeError, OSError) as exc:
            raise await self.gone(stdin_broke(exc), if_exited) from None

    async def startup_quiet(self) -> None:
        """Before the first request: wait out the start-up quiet (:meth:`Conversation.startup_left`;
        the reader, running meanwhile, finds what the worker writes unasked)."""
        while (left := self.conv.startup_left(time.monotonic(), waiting=self._waiting())) > 0:
            await asyncio.sleep(min(left, policy.STARTUP_POLL))

    def _waiting(self) -> bool:
        """The worker waits for input, and nothing it wrote waits to be read."""
        reading = self._read is not None and self._read.done()
        return not reading and self.transport.waiting_for_input()

    def add_job(self, job: Job) -> None:
        """A request was written: its time limit starts to run (now, if it is the head)."""
        self.conv.sent(job)
        self._rearm.set()
        if self._woken is not None and not self._woken.done():
            self._woken.set_result(None)  # not by output: the time limits are looked at again
            self._rearmed = True

    async def read_tokens(self) -> list[Token] | None:
        """The next tokens from the worker's stdout; None at end of file; ``[]`` when
        ``quiet_until`` passed with nothing outstanding and nothing read.

        The pending read survives while the time limits are re-evaluated (a request
        written meanwhile starts its clock), so no byte is lost to a re-arm.
        """
        while True:
            chunk = await self._next_chunk()
            if chunk is None or not chunk:
                return None if chunk is None else []
            try:
                tokens = self.conv.heard(chunk, time.monotonic())
            except ProtocolViolation as exc:
                raise self.violation(exc) from None
            if tokens:
                self.tokens_arrived = self.transport.last_arrival
                return tokens

    async def _next_chunk(self) -> bytes | None:
        """A chunk of stdout; None at end of file; b"" when ``quiet_until`` passed first.

        A chunk received already is taken as it is: no task, no timer (the relay's common
        case at sustained load), and never lost to a time limit that passed meanwhile.
        Otherwise it waits for output, a request written (its time limit starts) or the
        nearest limit: on one future the transport resolves when it can, or on a read in
        a task when it cannot.
        """
        woken = False  # by output: it arrived just now (the confirmation's rules use when)
        while self._read is None:
            chunk = self.transport.read_now(woken)
            if chunk is not None:
                return chunk or None
            loop = asyncio.get_running_loop()
            waiter: asyncio.Future[None] = loop.create_future()
            if not self.transport.wake_on_output(waiter):
                self._read = asyncio.ensure_future(self.transport.read())
                break
            deadline, what = self._limit()
            self._woken, self._rearmed = waiter, False
            try:
                async with asyncio.timeout_at(None if deadline is None else loop.time() + deadline - time.monotonic()):
                    await waiter
            except TimeoutError:
                return self._timed_out(what)
            finally:
                self._woken = None
            woken = not self._rearmed
        while True:
            deadline, what = self._limit()
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._rearm.clear()
            rearm: asyncio.Future[Any] = asyncio.ensure_future(self._rearm.wait())
            waiting: set[asyncio.Future[Any]] = {self._read, rearm}
            try:
                done, _ = await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                rearm.cancel()
            if self._read in done:
                break
            if rearm not in done:
                return self._timed_out(what)
        task, self._read = self._read, None
        try:
            chunk = task.result()
        except (ConnectionResetError, OSError) as exc:
            raise await self.gone(f"stdout failed: {exc}") from None
        return chunk or None

    def _limit(self) -> tuple[float | None, str]:
        """The nearest time limit (``time.monotonic()``) and its name; ``""``: the quiet asked."""
        deadline, what = self.conv.deadline()
        quiet = self.quiet_until if not self.inflight else None
        if quiet is not None and (deadline is None or quiet < deadline):
            return quiet, ""
        return deadline, what

    def _timed_out(self, what: str) -> bytes:
        """b"" when it was the quiet asked for; a worker past a time limit fails."""
        if not what:
            return b""
        raise WorkerTimeout(f"{self.label} did not answer within its {what}", self.context())

    async def close_and_drain(self, grace: float) -> list[Token]:
        """Close the worker's stdin ("no more work") and read its stdout to the end.

        Returns what it wrote after its last answer (nothing, from a worker in step);
        waits at most ``grace`` seconds for the end of its output.
        """
        self.transport.close_input()
        self.quiet_until = time.monotonic() + grace
        leftover: list[Token] = []
        while True:
            tokens = await self.read_tokens()
            if not tokens:  # end of file, or quiet for the whole grace
                unended = self.conv.parser.pending_bytes
                if unended:
                    leftover.append(b"(%d bytes with no EOM)" % unended)
                return leftover
            leftover.extend(tokens)

    async def stop(self, grace: float = 10.0) -> int | None:
        """Stdin closed, ``grace`` seconds, SIGTERM, ``grace`` seconds, SIGKILL of its tree."""
        return await self.transport.stop(grace, grace)

    async def abort(self) -> None:
        """Kill the worker and reap it."""
        if self._read is not None:
            self._read.cancel()
        await self.transport.abort()
