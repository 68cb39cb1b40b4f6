"""One stage's conversation with its worker inside a Spark task, without an event loop.

The bytes are the project's one protocol implementation: :class:`ReplyParser` tokenises
the worker's output, :class:`ReplyRules` says which request each token answers.  This
module adds what a task needs around them: jobs cut from the task's input (single
requests, batches closed by EOB, worker-driven batches written ahead of their BNCs), a bound on
what is written ahead, time limits, answers held until the worker is known to be in
step (it stayed quiet with nothing outstanding, as the supervisor confirms), restarts
that send again what was not confirmed, and ``on_failure`` (fail, or dead letters in
the state store under ``state_dir``).

A micro-batch is a window: the task's input ending is the barrier that closes the last
batch with EOB.  An E-stage's side of the conversation is in :mod:`etlstage.spark.tasks.extract`.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from etlstage.config.model import StageConfig
from etlstage.conversation import policy
from etlstage.conversation.confirmation import Confirmation
from etlstage.conversation.job import Job, Messages
from etlstage.conversation.machine import Conversation
from etlstage.conversation.recovery import recover
from etlstage.conversation.writeahead import WriteAhead
from etlstage.errors import ProtocolViolation, WorkerError
from etlstage.kit.telling import broken_command
from etlstage.protocol import batchheader
from etlstage.protocol.scenario import Scenario
from etlstage.protocol.vocabulary import Mode
from etlstage.spark.tasks.batchids import TaskIds, task_source
from etlstage.spark.tasks.blocks import message_ends, spans
from etlstage.spark.tasks.ownership import Ownership
from etlstage.spark.tasks.prefetch import Jobs, NotReady, Prefetched
from etlstage.spark.tasks.process import WorkerProcess
from etlstage.spark.tasks.tally import Tally

log = logging.getLogger("etlstage.spark.stage")

TaskJob = Job[Messages]  # a Spark task's job: slices of its input


DeadLetterFn = Callable[[StageConfig, TaskJob, str], None]


class StageWorker:
    """A T-, L- or executor-side E-stage's worker in this Python process, reused across tasks."""

    broken_stdin_if_exited: str | None = None  # what a broken stdin means once the worker exited on its own

    def __init__(
        self, stage: StageConfig, scenario: Scenario, env: dict[str, str], cwd: str | None, label: str
    ) -> None:
        self.stage = stage
        self.scenario = scenario
        self.env = env
        self.cwd = cwd
        self.argv = scenario.expand(stage.argv())  # the plan may point it at shipped copies
        self.label = label
        self.eom = stage.markers.EOM
        self.proc: WorkerProcess | None = None
        self.tally = Tally(stage.name, 0)  # starts, requests, restarts, failures: reported to the driver
        self.report: Callable[[], None] = lambda: None  # publishes the tally (set by the plan)
        self.restarts = policy.Restarts(stage.restart, label)
        self.deadletter: DeadLetterFn | None = None
        self.conv: Conversation[TaskJob] | None = None  # the current process's side of the conversation
        self._held: Confirmation[TaskJob] | None = None  # the current attempt's answers, unconfirmed
        self.pipeline = ""  # part of each batch id (set by the plan)
        self._ids: TaskIds | None = None  # an L-stage with batch_id: the current task's
        self.ownership: Ownership | None = None  # this host's right to run (stage, partition)
        self.in_use = threading.Lock()  # held by the task using this worker

    # --- process ------------------------------------------------------------------------------

    def _ensure(self) -> WorkerProcess:
        """The worker, started if there is none.  One that went away since its last task is
        not replaced quietly: that is a failure the restart policy counts, as the supervisor
        counts a worker that exits while waiting for work (a silent replacement would ignore
        ``max_restarts`` and hide a worker that exits after every task).  It is raised before
        anything is written, so no job is charged a try for it."""
        if self.proc is not None and (self.proc.eof or self.proc.proc.poll() is not None):
            raise self.proc.gone(self._went_early())
        if self.proc is None:
            handed = None  # the running worker the last owner passed on: no new start
            if self.ownership is not None:
                handed, self.ownership.handed = self.ownership.handed, None
            self.proc = WorkerProcess(self.argv, self.env, self.cwd, self.label, handed)
            self.proc.broken_stdin_if_exited = self.broken_stdin_if_exited
            if handed is None:
                self.tally.starts += 1
            if self.ownership is not None:
                self.ownership.record(self.proc.pid)
            if self.proc.pid not in self.tally.stats.pids:
                self.tally.stats.pids.append(self.proc.pid)
            self.conv = Conversation(
                self.scenario,
                self.stage.timeouts,
                self.stage.max_message_bytes,
                results=self.scenario.type != "L",  # E cycles and T requests answer with messages
                started=time.monotonic(),
                worked=self.conv is not None and self.conv.worked,
            )
            self.pending: collections.deque[memoryview] = collections.deque()
            if handed is None and self.scenario.has_requests:
                self._startup_quiet()
        return self.proc

    def _startup_quiet(self) -> None:
        """Before the first request, as the supervisor: watch the fresh worker for
        :data:`policy.STARTUP_QUIET` (less once it waits for that request with nothing
        written).  Output meanwhile is a violation (no request outstanding), not the start
        of its first answer; an exit is read here, before anything is asked."""
        proc, conv = self.proc, self.conv
        assert proc is not None and conv is not None
        while (left := conv.startup_left(now := time.monotonic(), waiting=proc.waiting_for_input())) > 0:
            self._step(now + min(left, policy.STARTUP_POLL))

    def stop(self, grace: float | None = None) -> int | None:
        """Close the worker's stdin and wait for it (then SIGTERM, SIGKILL); let go of ownership."""
        code = None
        if self.proc is not None:
            proc, self.proc = self.proc, None
            code = proc.stop(self.stage.stop_timeout if grace is None else grace)
            if code not in (0, None):
                log.warning("%s exited with status %s after its stdin closed (expected 0)", self.label, code)
        if self.ownership is not None:
            self.ownership.release()
            self.ownership = None
        return code

    def hand_over(self) -> bool:
        """Pass the idle, running worker to the Spark Python process that asked for its
        partition (:mod:`etlstage.spark.tasks.ownership`) and let go of ownership; False if it
        cannot be (nothing running, something unfinished, nobody waiting): then stop it."""
        proc, ownership = self.proc, self.ownership
        if proc is None or ownership is None or proc.eof or proc.proc.poll() is not None:
            return False
        if self.pending or self._held or (self.conv is not None and self.conv.outstanding):
            return False
        if not proc.hand_over(ownership.address):
            return False
        self.proc, self.ownership = None, None
        ownership.release()
        return True

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc = None

    def failed(self, exc: WorkerError) -> None:
        """The worker failed and will be restarted: counted, and the driver told at once."""
        self.tally.stats.failed(exc)
        self.report()

    def stop_if_broken(self, exc: WorkerError) -> None:
        """``exc`` shows a broken command (:func:`policy.broken_command`): the worker is
        killed and the stage stops at once, in the supervisor's words; else nothing."""
        proc, conv = self.proc, self.conv
        if proc is None or conv is None:
            return
        if conv.broken(exc, proc.returncode()):
            self.kill()
            raise broken_command(self.label, proc.tail, exc)

    # --- reading replies ----------------------------------------------------------------------

    def _step(self, until: float | None = None) -> list[TaskJob]:
        """Move bytes once: the jobs answered in full.

        ``until``: return empty-handed at that time (settling) instead of timing out.
        """
        proc, conv = self.proc, self.conv
        assert proc is not None and conv is not None
        deadline, what = (until, "") if until is not None else conv.deadline()
        chunks = proc.pump(self.pending, deadline, None if until is not None else what)
        done: list[TaskJob] = []
        for chunk in chunks:
            try:
                tokens = conv.heard(chunk, proc.last_output)
            except ProtocolViolation as exc:
                raise self._handing_back(done, self._violation(exc)) from None
            now = time.monotonic()
            reading = conv.answers(tokens, now, proc.last_arrival)
            for job in reading.completed:
                self.tally.stats.answered(now - job.started)
            done.extend(reading.completed)
            if reading.violation is not None:
                raise self._handing_back(done, self._violation(reading.violation))
        if proc.eof:
            raise self._handing_back(done, proc.gone(self._went_early()))
        return done

    def _went_early(self) -> str:
        """What the worker did by ending its output before it was asked to."""
        assert self.conv is not None
        return self.conv.went_early()

    def _handing_back(self, done: list[TaskJob], error: WorkerError) -> WorkerError:
        """``error`` ends this read: the jobs it had just answered are held with the rest, so
        that the restart sends them again (the failure may show they were out of step), as
        the supervisor takes back what it held."""
        if self._held is not None:
            for job in done:
                self._held.add(job)
        return error

    def _violation(self, exc: ProtocolViolation) -> WorkerError:
        assert self.proc is not None
        return WorkerError(f"protocol violation by {self.label}: {exc.problem}", self.proc.context(exc.snippet))

    def _confirm(self, held: Confirmation[TaskJob]) -> None:
        """Nothing outstanding: the worker stays quiet for the settle time until every held
        answer is confirmed (:meth:`Confirmation.confirm`: one quiet check, or two once an
        answer gave cause for doubt), or its answers were out of step (raised)."""
        while held:
            until = time.monotonic() + held.settle()
            while time.monotonic() < until:
                self._step(until)
            held.confirm()

    def _hold(self) -> Confirmation[TaskJob]:
        """A new attempt's answers, held until confirmed: their results go to Spark only
        then (no windows; the feed pauses at ``replay_bytes`` held instead)."""
        assert self.conv is not None
        self._held = Confirmation(0, self.stage.replay_bytes, self.conv.pace)
        return self._held

    def _write(self, job: TaskJob, *parts: bytes) -> None:
        assert self.conv is not None
        self.conv.sent(job)
        self.pending.extend(memoryview(p) for p in parts if p)

    # --- T and L: jobs in, confirmed results out -----------------------------------------------

    def transform(self, blocks: Iterable[bytes], *, ahead: bool = False, ahead_bytes: int = 0) -> Iterator[bytes]:
        """Each input block's messages through the worker; yields result blocks once confirmed.

        L-stages yield nothing: their EOPs are the acknowledgement.  ``ahead``: ``blocks``
        are pulled and cut into jobs in a thread of their own (:mod:`etlstage.spark.tasks.prefetch`:
        for input that is not Spark's own iterator), up to ``ahead_bytes`` of them waiting,
        and the worker's answers are read while none has come.
        """
        if self.stage.batch_id:
            self._ids = TaskIds(self.pipeline, self.stage.name, self.scenario.instance, task_source())
        cut = self._jobs(iter(blocks))
        jobs: Jobs[TaskJob] = (
            Prefetched(cut, self.label, max_bytes=ahead_bytes, size=lambda job: job.size) if ahead else Jobs(cut)
        )
        todo: collections.deque[TaskJob] = collections.deque()
        try:
            while True:
                try:
                    yield from self._attempt(todo, jobs)
                    return
                except WorkerError as exc:
                    self._recover(exc, todo)
        finally:
            jobs.close()

    def _jobs(self, blocks: Iterator[bytes]) -> Iterator[TaskJob]:
        """Jobs cut from the task's input as the supervisor cuts them from a stage's inbox
        (:func:`policy.batch_cut`): at ``batch_size`` messages (single requests:
        ``single_job_size``) or ``batch_bytes``; the end of the input is the micro-batch's
        barrier, which closes the last one."""
        st = self.stage
        single = st.mode == Mode.SINGLE
        want = st.single_job_size if single else st.batch_size

        ids = self._ids

        def job(n: int, block: bytes) -> TaskJob:
            if single:
                return Job(requests=n, pieces=[Messages(block, n)])
            if ids is None:
                return Job(pieces=[Messages(block, n)], batch=True, closed=not st.worker_driven)
            offset = ids.take(n)
            return Job(
                pieces=[Messages(block, n, offset)],
                batch=True,
                closed=not st.worker_driven,
                ident=ids.ident(offset, block),
            )

        carry: list[bytes] = []  # the messages of a job not yet full, from earlier blocks
        held = held_bytes = 0
        for block in blocks:
            ends = message_ends(block, st.markers.eom)  # bisected by batch_cut: no per-message loop
            first = 0
            while (
                cut := policy.batch_cut(ends, first, held, held_bytes, want=want, max_bytes=st.batch_bytes)
            ) is not None:
                start = ends[first - 1] if first else 0
                end = ends[cut - 1] if cut > first else start
                yield job(held + cut - first, b"".join([*carry, block[start:end]]))
                carry, held, held_bytes, first = [], 0, 0, cut
            if first < len(ends):
                start = ends[first - 1] if first else 0
                carry.append(block[start : int(ends[-1])])
                held += len(ends) - first
                held_bytes += int(ends[-1]) - start
        if held:
            yield job(held, b"".join(carry))  # the micro-batch's barrier

    def _attempt(self, todo: collections.deque[TaskJob], jobs: Jobs[TaskJob]) -> Iterator[bytes]:
        self._ensure()
        conv = self.conv
        assert conv is not None
        worker_driven = self.scenario.worker_driven
        depth = 1 if worker_driven else self.stage.jobs_in_flight
        held = self._hold()
        exhausted = False
        while True:
            # feed: up to `depth` jobs in flight; an isolated job goes alone, and a job charged a
            # try behind answered ones waits until they are confirmed (policy.in_step_first)
            # answered input held unconfirmed up to replay_bytes (then feeding pauses to confirm)
            while not exhausted and conv.has_slot(depth) and held.bytes < self.stage.replay_bytes:
                # waits for input only with nothing to read meanwhile (answers read late look slow)
                job = todo.popleft() if todo else jobs.take(wait=not conv.outstanding)
                if isinstance(job, NotReady):
                    break
                if job is None:
                    exhausted = True
                    break
                if conv.must_wait_in_step(job, unconfirmed=bool(held)) or not conv.has_room(
                    job.size, replay_bytes=self.stage.replay_bytes
                ):
                    todo.appendleft(job)
                    break
                if worker_driven:
                    self._feed_worker_driven(job)
                elif job.ident is not None:
                    self._write(job, batchheader.header(job.ident, self.eom), job.block, self.stage.markers.EOB)
                elif job.batch:
                    self._write(job, job.block, self.stage.markers.EOB)
                else:
                    self._write(job, job.block)
                if job.alone:
                    break
            if not conv.outstanding and not self.pending:
                if held:
                    answered = list(held.jobs)
                    self._confirm(held)
                    self.restarts.succeeded()
                    yield from self._results(answered)
                if exhausted and not todo:
                    return
                continue
            done = self._step()
            for job in done:
                held.add(job)

    def _feed_worker_driven(self, job: TaskJob) -> None:
        """The batch's messages at once, ahead of the worker's BNCs (:class:`WriteAhead`;
        :meth:`_jobs` cut it to ``batch_size`` and ``batch_bytes``), then EOB if it is short.
        The reply rules count the BNCs; its answer is read by the caller's loop."""
        st = self.stage
        job.closed = False  # an isolated message is written as a batch of one
        ahead = WriteAhead(job, batch_size=st.batch_size, batch_bytes=st.batch_bytes, replay_bytes=st.replay_bytes)
        ahead.add(len(job.block))
        self._write(job, job.block, st.markers.EOB if ahead.close() else b"")

    def _results(self, confirmed: list[TaskJob]) -> Iterator[bytes]:
        for job in confirmed:
            if job.results:
                yield b"".join(job.results)

    def _recover(self, exc: WorkerError, todo: collections.deque[TaskJob]) -> None:
        """Kill the failed worker; what it held or owed goes out again (head charged a try)."""
        conv = self.conv  # None: the first start failed
        unanswered = list(conv.outstanding) if conv is not None and self.proc is not None else []
        answered = self._held.take_back() if self._held is not None else []
        self.stop_if_broken(exc)
        self.kill()
        self.failed(exc)
        recovery = recover(self.stage, answered, unanswered, exc, self._singles)
        head = unanswered[0] if unanswered else None
        if recovery.verdict == policy.Verdict.ISOLATE and head is not None:
            log.warning(policy.ISOLATING, self.label, head.messages, head.attempts)
        if recovery.dead is not None and self.deadletter is not None:
            self.deadletter(self.stage, recovery.dead, str(exc))
        delay, note = self.restarts.failed(exc, None if head is None else head.attempts)
        log.warning("%s", note)
        time.sleep(delay)
        todo.extendleft(reversed(recovery.again))

    def _singles(self, job: TaskJob) -> list[TaskJob]:
        """``job``'s messages as jobs of one each; with batch ids each has its own place and
        content (so its id differs from the batch's)."""
        block, offset = job.block, job.pieces[0].offset
        singles = [
            Job(pieces=[Messages(block[s:e], 1, offset + k)], batch=job.batch, closed=job.batch)
            for k, (s, e) in enumerate(spans(message_ends(block, self.stage.markers.eom)))
        ]
        if job.ident is not None and self._ids is not None:
            for single in singles:
                single.ident = self._ids.ident(single.pieces[0].offset, single.block)
        return singles


__all__ = ["StageWorker", "TaskJob"]
