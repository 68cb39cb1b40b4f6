"""Stage drivers: one stage's conversation with its worker instances.

:class:`TransformDriver` runs a T- or L-stage: it assembles jobs from the stage's inbox
(batches closed when full, at a window barrier, after ``linger``, or by EOB in answer
to a BNC), writes them, reads replies, and hands results on.  :class:`ExtractDriver`
runs an E-stage: plain (one window, the whole run) or cyclic (one window per request).

Both restart a failed worker with backoff and send again what it had not answered
(docs/protocol.md: windows); a job that keeps failing goes to the stage's ``on_failure`` policy.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from etlstage.config.model import StageConfig
from etlstage.conversation import batchid, handed, policy
from etlstage.conversation.handed import Handed
from etlstage.conversation.recovery import recover
from etlstage.conversation.writeahead import WriteAhead
from etlstage.errors import (
    EXITED_BETWEEN_CYCLES,
    PipelineError,
    ProtocolViolation,
    UnaskedReply,
    WorkerError,
    WorkerGone,
    WorkerTimeout,
    cycle_cut_short,
)
from etlstage.kit.stats import StageStats
from etlstage.kit.transport import Transport
from etlstage.protocol import batchheader
from etlstage.protocol.framing import EOP, count_eom, split_block
from etlstage.protocol.replies import unasked_before_request
from etlstage.protocol.scenario import Scenario
from etlstage.protocol.vocabulary import Mode
from etlstage.runtime import places
from etlstage.runtime.confirm import RECHECK, Unconfirmed
from etlstage.runtime.flow import Inbox, Job, Piece, Window, oldest_window
from etlstage.runtime.places import Places
from etlstage.runtime.session import WorkerSession
from etlstage.runtime.tasks import Scope, run_all, run_until

log = logging.getLogger("etlstage.stage")

SpawnFn = Callable[[StageConfig, Scenario, str], Awaitable[Transport]]
EmitFn = Callable[[Piece], Awaitable[None]]
DeadLetterFn = Callable[[StageConfig, Job, str], None]


class Restarts(policy.Restarts):
    """Backoff between restarts of one worker instance (:class:`policy.Restarts`), waited here."""

    def __init__(self, stage: StageConfig, label: str) -> None:
        super().__init__(stage.restart, label)

    async def wait(self, error: WorkerError, charged: Job | None = None) -> None:
        """Back off before a restart.  ``charged``: the job that took the blame; its own
        tries decide what happens (on_failure); otherwise too many failures in a row stop
        the pipeline."""
        delay, note = self.failed(error, None if charged is None else charged.attempts)
        log.warning("%s%s", note, _unseen_stderr(error))
        await asyncio.sleep(delay)


def _unseen_stderr(error: WorkerError) -> str:
    """The failed worker's stderr tail, when the level hides its relayed lines (INFO)."""
    if logging.getLogger("etlstage.worker").isEnabledFor(logging.INFO):
        return ""
    at = next((k for k, line in enumerate(error.context) if line.startswith("stderr")), None)
    return "" if at is None else "\n" + "\n".join(f"  {line}" for line in error.context[at:])


class _Driver:
    def __init__(self, stage: StageConfig, level: int, state_dir: str, spawn: SpawnFn, stats: StageStats) -> None:
        self.stage = stage
        self.level = level
        self.state_dir = state_dir
        self.spawn = spawn
        self.stats = stats
        self.sessions: dict[int, WorkerSession] = {}
        self.halted = False  # the pipeline is stopping its workers: no more starts

    def label(self, instance: int) -> str:
        return self.stage.label(instance)

    async def start(self, instance: int, worked: bool = False) -> WorkerSession:
        """A worker process for ``instance``; ``worked``: an earlier one of it answered a request."""
        scenario = self.stage.scenario(instance, self.state_dir)
        argv = scenario.expand(self.stage.argv())
        label = self.label(instance)
        transport = await self.spawn(self.stage, scenario, label)
        session = WorkerSession(transport, scenario, label, argv, self.stage.timeouts, self.stage.max_message_bytes)
        session.conv.worked_before = worked
        self.sessions[instance] = session
        self.stats.workers[instance] = transport
        self.stats.state_dir = self.state_dir
        if transport.pid is not None:
            self.stats.pids.append(transport.pid)
        log.debug("started %s: pid %s", label, transport.pid)
        return session

    def stopped_on_purpose(self, label: str) -> bool:
        """True once the pipeline stops its workers (a drain timeout): a worker ending then has
        not failed and is not restarted."""
        if self.halted:
            log.info("%s stopped by the pipeline before it finished; its unfinished work is done again next run", label)
        return self.halted

    async def stop_all(self) -> None:
        """Every worker gets the stage's stop sequence, at the same time; none starts again."""
        self.halted = True
        await asyncio.gather(*(s.stop(self.stage.stop_timeout) for s in self.sessions.values()))

    async def _failed(self, session: WorkerSession, exc: WorkerError) -> bool | None:
        """A worker failed: kill and reap it. None when the pipeline stopped it on purpose (its
        instance ends); otherwise whether any process of the instance has answered yet. One
        that never did and exited before its first request is a broken command: raised."""
        await session.abort()
        if self.stopped_on_purpose(session.label):
            return None
        broken = session.broken_command(exc)
        if broken is not None:
            raise broken from exc
        return session.conv.worked

    async def abort_all(self) -> None:
        """Every worker killed and reaped, all at once."""
        await asyncio.gather(*(s.abort() for s in list(self.sessions.values())))


class TransformDriver(_Driver):
    """A T- or L-stage (``single`` or ``batch``; supervisor- or worker-driven)."""

    def __init__(
        self,
        stage: StageConfig,
        level: int,
        state_dir: str,
        spawn: SpawnFn,
        stats: StageStats,
        inboxes: list[Inbox],
        emit: EmitFn,
        deadletter: DeadLetterFn,
    ) -> None:
        super().__init__(stage, level, state_dir, spawn, stats)
        self.inboxes = inboxes  # one per instance (the same object when not partitioned)
        self.emit = emit
        self.deadletter = deadletter
        self.eom = stage.markers.EOM
        self.on_job_done: Callable[[Job], None] | None = None  # the harness listens here
        self.pipeline_name = ""  # part of each batch id (set by the pipeline)
        self.places = [Places() for _ in range(stage.instances)] if stage.batch_id else []

    async def run(self) -> None:
        await run_all(*(self._instance(i) for i in range(self.stage.instances)))

    # --- one instance: start, converse, restart ---------------------------------------

    async def _instance(self, i: int) -> None:
        restarts = Restarts(self.stage, self.label(i))
        retry: list[Job] = []  # sent to a worker that failed: sent again first, as they were
        worked = False  # a process of this instance answered a request
        while True:
            if self.stopped_on_purpose(self.label(i)):  # its back-off ended as the pipeline stops its workers
                return
            session = await self.start(i, worked)
            held = Unconfirmed(self.level, self.stage.replay_bytes, session.conv.pace)
            try:
                recycle = await self._converse(session, self.inboxes[i], retry, restarts, held)
                await self._close(session, held, restarts)
            except WorkerError as exc:
                answered = await self._failed(session, exc)
                if answered is None:
                    return
                worked = answered
                failed = list(session.inflight)
                session.inflight.clear()
                self.stats.in_flight -= len(failed)
                misaligned = not isinstance(exc, (WorkerGone, WorkerTimeout))
                shifted = isinstance(exc.__cause__, UnaskedReply)  # answers and requests no longer line up
                committed = held.committed_on_quiet() if shifted else []
                if committed:
                    names = ", ".join(f"{w.source} {w.seq}" for w in committed)
                    raise PipelineError(
                        f"stage {self.stage.name!r}: {session.label} broke the protocol after windows ({names}) were "
                        "committed on its answers, confirmed by quiet alone: a stray EOP with a late answer may have "
                        "left a message of those windows unloaded or on the wrong request. Check what they loaded; "
                        "the stage stops (nothing later commits: the next run extracts the rest again).\n"
                        f"Cause: {exc}"
                    ) from exc
                if held.input_let_go() and misaligned:
                    raise PipelineError(
                        f"{session.label} broke the protocol after answering more than replay_bytes "
                        f"({self.stage.replay_bytes} bytes) of input since it was last known to be in step, so "
                        "some answers may be on the wrong requests and cannot all be sent again; the stage stops "
                        "(nothing committed past them: the next run extracts them again).\n"
                        f"Cause: {exc}"
                    ) from exc
                again = held.take_back()  # answered, but not known to be in step: sent again too
                if again:
                    log.warning(
                        "%s: %d answered job(s) since it was last known to be in step are sent again",
                        session.label,
                        len(again),
                    )
                resend = self._after_failure(again, failed, exc)
                for job in again + resend:
                    job.resent = True
                    if job.handed is not None:
                        job.handed.sent_again()
                    self.stats.resent += sum(p.count for p in job.pieces)
                retry[:0] = again + resend
                self.stats.failed(exc, i)
                await restarts.wait(exc, failed[0] if failed else None)
                continue
            worked = session.conv.worked
            code = await session.stop(self.stage.stop_timeout)
            if code not in (0, None):
                log.warning("%s exited with status %s after its stdin closed (expected 0)", session.label, code)
            if not recycle:
                return

    async def _close(self, session: WorkerSession, held: Unconfirmed, restarts: Restarts) -> None:
        """No more work: close stdin, read to the end; a worker in step writes nothing more."""
        leftover = await session.close_and_drain(self.stage.stop_timeout)
        if leftover:
            snippet = b"".join(t if isinstance(t, bytes) else repr(t).encode() for t in leftover)
            raise session.violation(
                UnaskedReply("the worker wrote more after its last answer, once its stdin was closed", snippet)
            )
        if held.confirm(proven=True):
            restarts.succeeded()

    def _after_failure(self, again: list[Job], failed: list[Job], exc: WorkerError) -> list[Job]:
        """The unanswered jobs to send again after the ``again`` ones (:func:`recover`: the
        head charged a try; isolated, or set aside as a dead letter, when out of tries)."""
        recovery = recover(self.stage, again, failed, exc, self._singles)
        if recovery.verdict == policy.Verdict.ISOLATE:
            log.warning(policy.ISOLATING, self.stage.name, failed[0].messages, failed[0].attempts)
        if recovery.dead is not None:
            self.deadletter(self.stage, recovery.dead, str(exc))
            self.stats.deadletters += recovery.dead.messages
            self._release(recovery.dead)
        return recovery.resend

    def _singles(self, job: Job) -> list[Job]:
        """``job``'s messages as jobs of one each; with batch ids each keeps its own place
        (so its id differs from the batch's)."""
        singles = [
            Job(pieces=[Piece(m, 1, p.window)], batch=job.batch)
            for p in job.pieces
            for m in split_block(p.block, self.stage.markers, keep_eom=True)
        ]
        if job.places is not None:
            own = places.singles(job.places, [p.count for p in job.pieces])
            for single, place in zip(singles, own, strict=True):
                single.places = [place]
        return singles

    async def _converse(
        self, session: WorkerSession, inbox: Inbox, retry: list[Job], restarts: Restarts, held: Unconfirmed
    ) -> bool:
        """Feed jobs and read replies until the inbox is closed, empty and all answered.

        Returns True when the worker should be replaced between batches (``max_rss``).
        """
        return await _Conversation(self, session, inbox, retry, restarts, held).run()

    # --- assembling and framing jobs ------------------------------------------------------

    async def _assemble(self, inbox: Inbox, instance: int) -> Job | None:
        """The next job from the inbox; None once it is closed and empty.

        What it has gathered while it waits for more is still the inbox's: if the wait is
        cut short (the worker failed, and the conversation's tasks are cancelled), it goes
        back to the front, for the next worker (otherwise its window never completes)."""
        pieces: list[Piece] = []
        try:
            return await self._gather(inbox, instance, pieces)
        except BaseException:
            inbox.put_back(pieces)
            raise

    async def _gather(self, inbox: Inbox, instance: int, pieces: list[Piece]) -> Job | None:
        st = self.stage
        single = st.mode == Mode.SINGLE
        want = st.single_job_size if single else st.batch_size
        n = size = 0
        deadline: float | None = None
        loop = asyncio.get_running_loop()
        while True:
            got = inbox.take(want - n, st.batch_bytes - size, at_least_one=not n)
            for p in got:
                pieces.append(p)
                n += p.count
                size += len(p.block)
            if policy.batch_full(n, size, want=want, max_bytes=st.batch_bytes) or (n and single):
                break
            if n and st.worker_driven:
                break  # written at once; the rest of the batch is written ahead as it comes
            if n and not got and len(inbox):
                break  # the next message would take the batch over batch_bytes
            if n and not len(inbox) and all(p.window.settled_before(self.level) for p in pieces):
                break  # window barrier: nothing more of these windows can arrive
            if not len(inbox) and inbox.closed:
                if not n:
                    return None
                break
            if n:
                deadline = deadline or loop.time() + st.linger
                if loop.time() >= deadline:
                    break
            await inbox.wait_changed(deadline)
        batch = st.mode == Mode.BATCH
        job = Job(pieces=pieces, requests=1 if batch else n, batch=batch)
        if self.places:
            job.places = self.places[instance].take(pieces)
        self.stats.took(instance, n, sum(len(p.block) for p in pieces))
        return job

    async def _write_job(self, session: WorkerSession, job: Job) -> None:
        """The job's messages, and EOB after a batch, in one write (no copy of the blocks);
        first its id, when the stage asks for one (the same id each time it is sent)."""
        blocks = [p.block for p in job.pieces]
        if job.places is not None:
            if job.ident is None:
                job.ident = batchid.batch_id(
                    self.pipeline_name, self.stage.name, session.scenario.instance, job.places, *blocks
                )
            blocks.insert(0, batchheader.header(job.ident, self.eom))
        if job.batch:
            job.closed = True
            blocks.append(self.stage.markers.EOB)
        await session.write_all(blocks)

    async def _feed_worker_driven(
        self, session: WorkerSession, inbox: Inbox, job: Job, grew: Callable[[int], None]
    ) -> None:
        """Write the batch's messages as they come, ahead of the worker's BNCs, up to its
        size (:class:`WriteAhead`); EOB right after the last one when it closes short: the
        input ran dry for ``linger``, its windows' barrier, ``batch_bytes``.  ``grew``: told
        the bytes of each message added to the job.

        A job sent again after a failure keeps its messages: written at once, and EOB
        if it is short.
        """
        st = self.stage
        ahead = WriteAhead(job, batch_size=st.batch_size, batch_bytes=st.batch_bytes, replay_bytes=st.replay_bytes)
        size = sum(len(p.block) for p in job.pieces)
        ahead.add(size)
        for p in job.pieces:
            await session.write(p.block)
        if not job.resent:
            await self._write_ahead(session, inbox, job, ahead, grew)
        if ahead.close():
            await session.write(st.markers.EOB)

    async def _write_ahead(
        self, session: WorkerSession, inbox: Inbox, job: Job, ahead: WriteAhead, grew: Callable[[int], None]
    ) -> None:
        """More of the inbox into the open batch until it is full, or should close."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.stage.linger
        while True:
            want, room = ahead.room()
            if not want:
                return  # filled: the worker answers after the last message
            got = inbox.take(want, room, at_least_one=False) if room else []
            if got:
                n = sum(p.count for p in got)
                size = sum(len(p.block) for p in got)
                for p in got:
                    job.add(p)
                grew(size)
                ahead.add(size)
                self.stats.took(session.scenario.instance, n, size)
                block = got[0].block if len(got) == 1 else b"".join(p.block for p in got)
                await session.write(block)
                deadline = loop.time() + self.stage.linger
                continue
            if len(inbox) or not room:
                return  # the next message would take the batch over batch_bytes: it starts the next
            if inbox.closed or all(p.window.settled_before(self.level) for p in job.pieces):
                return  # window barrier: nothing more of these windows can arrive
            if loop.time() >= deadline:
                return
            await inbox.wait_changed(deadline)

    # --- completion -----------------------------------------------------------------------

    def _answered(self, job: Job, held: Unconfirmed) -> None:
        """``job`` answered (its time is in the conversation's pace already).

        Held until the worker is known to be in step, an L-worker's EOP as a T's answer: a
        stray EOP may have acknowledged a batch the worker then dies on (docs/protocol.md).
        Held at once, before its results go on (:meth:`_hand_on`, which may wait for room
        downstream): a failure meanwhile finds it among the answered, and sends it again."""
        now = time.monotonic()
        self.stats.in_flight -= 1
        self.stats.answered(now - job.started)
        if self.on_job_done is not None:
            self.on_job_done(job)
        held.add(job)

    async def _hand_on(self, job: Job, instance: int) -> None:
        """An answered job's results to the next stage, then its input let go at this level."""
        if job.results:
            block = b"".join(job.results) if len(job.results) > 1 else job.results[0]
            job.results.clear()  # handed on; a job held for confirmation keeps its input only
            n = count_eom(block, self.eom)
            if not self.stage.deterministic:
                pass  # every answer goes on: nothing to remember
            elif job.handed is None:
                job.handed = Handed()
            elif not job.handed.went_on:
                pass  # its earlier answer never went on (a failure cut it short): this one does
            elif not job.handed.hand_on(block, deterministic=True):
                self.stats.withheld += n  # a re-answer equal to what went on before
                block = b""
            else:
                log.warning(handed.MISMATCH, self.stage.name, n)
            if block:
                self.stats.produced(instance, n, len(block))
                await self.emit(Piece(block, n, oldest_window(job)))
                # counted handed on only once it all went (a failure in the middle sends the
                # job again, and its re-answer goes on whole: at-least-once, never lost)
                if job.handed is not None:
                    job.handed.handing(block)
        self._release(job)

    def _release(self, job: Job) -> None:
        job.released = True
        for p in job.pieces:
            p.window.release(self.level, p.count)


class _Conversation:
    """One worker session's conversation: :meth:`feed` writes jobs, :meth:`read` takes
    their answers, until the inbox is closed, empty and everything answered."""

    def __init__(
        self,
        driver: TransformDriver,
        session: WorkerSession,
        inbox: Inbox,
        retry: list[Job],
        restarts: Restarts,
        held: Unconfirmed,
    ) -> None:
        self.driver, self.stage, self.session = driver, driver.stage, session
        self.inbox, self.retry, self.restarts, self.held = inbox, retry, restarts, held
        self.conv = session.conv
        self.depth = self.stage.jobs_in_flight  # a property: read once, not at every job
        self.drained = asyncio.Event()  # set whenever nothing is in flight
        self.drained.set()
        self.answered = asyncio.Event()  # set at each completed job
        self.recycle = False
        self.first = True  # the first job waits for the worker's start-up output, if any
        self.next_rss_check = 0.0

    async def run(self) -> bool:
        """True when the worker should be replaced between batches (``max_rss``)."""
        await run_until(self.feed(), self.read())
        return self.recycle

    def too_big(self) -> bool:
        if not self.stage.max_rss or time.monotonic() < self.next_rss_check:
            return False
        self.next_rss_check = time.monotonic() + 0.25
        used = self.session.transport.resources()
        if used is None or used[0] <= self.stage.max_rss:
            return False
        log.info(
            "%s uses %.0f MB, over max_rss %.0f MB: replacing it between batches",
            self.session.label,
            used[0] / 1e6,
            self.stage.max_rss / 1e6,
        )
        return True

    # --- writing ----------------------------------------------------------------------------------

    async def feed(self) -> None:
        while True:
            if self.too_big():
                self.recycle = True
                await self.drained.wait()
                return
            await self._wait_for_room()
            # Every wait comes before the job is taken: a worker that dies meanwhile must
            # find it still in ``retry`` or the inbox, not in a local variable of this task.
            await self._wait_before_taking()
            job = (
                self.retry.pop(0)
                if self.retry
                else await self.driver._assemble(self.inbox, self.session.scenario.instance)
            )
            if job is None:
                await self.drained.wait()
                return
            await self._send(job)

    async def _wait_for_room(self) -> None:
        """A slot among ``jobs_in_flight``, and input written and unanswered within
        ``replay_bytes`` (the next job's size is not known yet: ``batch_bytes``); answers
        held for confirmation are confirmed first once due."""
        stage, held, inbox, conv = self.stage, self.held, self.inbox, self.conv
        while not (conv.has_slot(self.depth) and conv.has_room(stage.batch_bytes, replay_bytes=stage.replay_bytes)):
            self.answered.clear()
            await self.answered.wait()
        while held and held.due() and not (inbox.closed and not len(inbox)):  # at the end: EOF confirms
            try:  # the reader confirms once the worker is quiet; the end of input may come first
                async with asyncio.timeout(RECHECK):
                    await held.empty.wait()
            except TimeoutError:
                pass

    async def _wait_before_taking(self) -> None:
        """The first job waits for the worker's start-up quiet; an isolated or blamed job
        for the worker to be in step with what went before."""
        if self.first:
            self.first = False
            await self.session.startup_quiet()
        if self.retry and self.conv.must_wait_in_step(self.retry[0], unconfirmed=bool(self.held)):
            await self.drained.wait()
            self.held.wanted = True  # blame stays exact: what went before is in step first
            await self.held.empty.wait()
            self.held.wanted = False

    async def _send(self, job: Job) -> None:
        session = self.session
        session.add_job(job)
        self.drained.clear()
        self.driver.stats.in_flight += 1
        if session.scenario.worker_driven:
            await self.driver._feed_worker_driven(session, self.inbox, job, self._grew)
        else:
            await self.driver._write_job(session, job)
        if job.alone:
            await self.drained.wait()

    def _grew(self, size: int) -> None:
        """A worker-driven batch took ``size`` more bytes of input (its answer counts them off)."""
        self.conv.grew(size)

    # --- reading ----------------------------------------------------------------------------------

    async def read(self) -> None:
        session = self.session
        while True:
            tokens = await session.read_tokens()
            if tokens is None:
                raise await session.gone(self.conv.went_early())
            if not tokens:  # quiet for the settle time with nothing outstanding: in step
                self._quiet()
                continue
            arrived = session.tokens_arrived
            reading = self.conv.answers(tokens, time.monotonic(), arrived)
            for job in reading.completed:  # each held before anything awaits
                self._answered(job, arrived)
            if reading.completed and session.scenario.worker_driven:
                # the worker waits for its next batch (nothing of it may be written before
                # this answer): let the feed write it while these results go on
                await asyncio.sleep(0)
            for job in reading.completed:
                await self.driver._hand_on(job, session.scenario.instance)
            if not session.inflight:
                self.drained.set()
                if self.held:
                    session.quiet_until = time.monotonic() + self.held.settle()
            if reading.violation is not None:
                raise session.violation(reading.violation)

    def _quiet(self) -> None:
        session, held = self.session, self.held
        session.quiet_until = None
        # A quiet check counts only while a held window waits on it, or the feed
        # does: quiet alone is weak evidence.  (At the end of input the feed ends
        # at once, and only the worker's clean end confirms: _close.)
        if (held.wanted or held.due()) and held.confirm():
            self.restarts.succeeded()
        if held:  # checked again: suspects need a second check; else polled for a window
            pressing = held.wanted or held.due()
            session.quiet_until = time.monotonic() + (held.settle() if pressing else RECHECK)

    def _answered(self, job: Job, arrived: float | None) -> None:
        self.driver._answered(job, self.held)
        self.answered.set()
        if not job.resent:
            self.restarts.succeeded()  # new work goes through: failures are no longer "in a row"


class ExtractDriver(_Driver):
    """An E-stage instance: plain (one window) or cyclic (a window per request)."""

    def __init__(
        self,
        stage: StageConfig,
        state_dir: str,
        spawn: SpawnFn,
        stats: StageStats,
        emit: EmitFn,
        open_window: Callable[[str, object], Window],
        next_request: Callable[[str], Awaitable[object]],
        once: bool,
    ) -> None:
        super().__init__(stage, 0, state_dir, spawn, stats)
        self.emit = emit
        self.open_window = open_window
        self.next_request = next_request  # waits until a request may be sent; returns it or STOP
        self.once = once
        self.eom = stage.markers.EOM
        self.stopping = False
        self._scope: Scope | None = None  # while it runs: its instances, and their stop sequences

    def request_stop(self) -> None:
        """Graceful stop: a plain E-worker is asked to end (stdin closed, then SIGTERM); the
        stop sequences run in the stage's scope (its run waits for them)."""
        self.stopping = True
        if self.stage.mode == Mode.PLAIN and self._scope is not None:
            for s in self.sessions.values():
                self._scope.start(s.stop(self.stage.stop_timeout))

    async def run(self) -> None:
        try:
            async with Scope() as self._scope:
                for i in range(self.stage.instances):
                    self._scope.start(self._instance(i))
        finally:
            self._scope = None

    async def _instance(self, i: int) -> None:
        label = self.label(i)
        restarts = Restarts(self.stage, label)
        window: Window | None = None  # reopened and asked again after a failure
        request: object = None
        worked = False  # a process of this instance answered a request
        while True:
            if self.stopped_on_purpose(label):  # its back-off ended as the pipeline stops its workers
                return
            session = await self.start(i, worked)
            try:
                if self.stage.mode == Mode.PLAIN:
                    window = window or self.open_window(label, None)
                    await self._plain(session, window)
                    code = await session.stop(self.stage.stop_timeout)
                    if self.stopping:
                        log.info("%s stopped before its end; its window will be extracted again next run", label)
                        return
                    if code != 0:
                        raise await session.gone(f"exited with status {code} (a plain E-worker ends with 0)")
                    window.close()
                    return
                while True:
                    if window is None:
                        request = await self.next_request(label)
                        if request is STOP:
                            await session.stop(self.stage.stop_timeout)
                            return
                        window = self.open_window(label, request)
                    empty = await self._cycle(session, window, request)
                    window.close()
                    window = None
                    restarts.succeeded()
                    if empty:
                        if self.once:  # its request acknowledged every earlier window
                            await session.stop(self.stage.stop_timeout)
                            return
                        await asyncio.sleep(self.stage.poll_interval)
            except WorkerError as exc:
                answered = await self._failed(session, exc)
                if answered is None:
                    return
                worked = answered
                self.stats.failed(exc, i)
                await restarts.wait(exc)

    async def _plain(self, session: WorkerSession, window: Window) -> None:
        while True:
            tokens = await session.read_tokens()
            if tokens is None:
                return
            for tok in tokens:
                assert isinstance(tok, bytes)
                await self._forward(tok, window, session.scenario.instance)

    async def _cycle(self, session: WorkerSession, window: Window, request: object) -> bool:
        """Send one request, forward its messages as they come; True when it was empty."""
        await self._nothing_unasked(session)
        raw = request if isinstance(request, bytes) else b""
        job: Job[Piece] = Job()
        session.add_job(job)
        await session.write(raw + self.eom, if_exited=EXITED_BETWEEN_CYCLES)
        before = window.messages
        while True:
            tokens = await session.read_tokens()
            if tokens is None:
                answered_any = window.messages != before or session.conv.parser.pending_bytes > 0
                raise await session.gone(cycle_cut_short(answered_any))
            for k, tok in enumerate(tokens):
                if tok is EOP:
                    if k != len(tokens) - 1:
                        rest = b"".join(t for t in tokens[k + 1 :] if isinstance(t, bytes))
                        raise session.violation(ProtocolViolation("bytes after EOP before the next request", rest))
                    session.conv.cycle_answered()
                    self.stats.answered(time.monotonic() - job.started)
                    return window.messages == before
                assert isinstance(tok, bytes)
                await self._forward(tok, window, session.scenario.instance)

    async def _nothing_unasked(self, session: WorkerSession) -> None:
        """Before a request: anything the worker wrote since its last EOP (a stray EOP would
        otherwise answer this request), or since it started, is a violation."""
        if not session.conv.answered:
            await session.startup_quiet()  # what it wrote meanwhile waits unread: read below
        session.quiet_until = time.monotonic()
        stray = await session.read_tokens()
        session.quiet_until = None
        if stray is None:
            raise await session.gone(EXITED_BETWEEN_CYCLES)
        unasked = unasked_before_request(stray, answered=session.conv.answered > 0)
        if unasked is not None:
            raise session.violation(unasked)

    async def _forward(self, block: bytes, window: Window, instance: int) -> None:
        n = count_eom(block, self.eom)
        window.messages += n
        self.stats.produced(instance, n, len(block))
        await self.emit(Piece(block, n, window))


STOP = object()


__all__ = ["STOP", "ExtractDriver", "Restarts", "TransformDriver"]
