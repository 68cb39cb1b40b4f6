"""An E-stage's conversation with its worker: a plain worker's output in pieces, cycle requests.

The same process handling, reply rules and time limits as :class:`StageWorker`; only
what is asked differs.  A plain worker runs once (its whole output is the extraction);
a cyclic worker is restarted with backoff and asked again, at most ``max_restarts``
times in a row.
"""

from __future__ import annotations

import logging
import time

from etlstage.conversation.job import Job, Messages
from etlstage.errors import EXITED_BETWEEN_CYCLES, ProtocolViolation, WorkerError, cycle_cut_short
from etlstage.protocol.framing import Token
from etlstage.protocol.replies import unasked_before_request
from etlstage.spark.tasks.conversation import StageWorker

log = logging.getLogger("etlstage.spark.stage")


class ExtractWorker(StageWorker):
    """A driver-side (plain, cyclic) or executor-side (supervisor offsets) E-stage's worker."""

    # its only writes are cycle requests: a broken pipe on one that exited found it gone between cycles
    broken_stdin_if_exited = EXITED_BETWEEN_CYCLES

    # --- plain E on the driver: what it wrote, in pieces ------------------------------------------

    def drain_plain(self, max_bytes: int, linger: float) -> tuple[bytes, bool]:
        """Complete messages the plain worker wrote since the last call, and whether it ended.

        Waits for the first bytes (bounded by the start-up / idle limits), then takes what
        comes within ``linger`` up to about ``max_bytes``.  A plain worker is not
        restarted: its whole run is one extraction, and a failure stops the query.
        """
        if self.proc is None:
            if self.tally.starts:
                return b"", True
            self._ensure()
        proc, conv = self.proc, self.conv
        assert proc is not None and conv is not None
        out: list[bytes] = []
        size = 0
        first: float | None = None
        deadline: float | None
        what: str | None
        while size < max_bytes:
            if first is not None:
                deadline, what = first + linger, None
            else:
                deadline, what = conv.deadline()
                what = what or None
            chunks = proc.pump(self.pending, deadline, what)
            for chunk in chunks:
                try:
                    tokens = conv.heard(chunk, proc.last_output)
                except ProtocolViolation as exc:
                    raise self._violation(exc) from None
                for tok in tokens:
                    assert isinstance(tok, bytes)  # a plain E's parser allows no EOP or BNC
                    out.append(tok)
                    size += len(tok)
            if out and first is None:
                first = time.monotonic()
            if proc.eof:
                return b"".join(out), self._ended()
            if first is not None and time.monotonic() >= first + linger:
                break
        return b"".join(out), False

    def _ended(self) -> bool:
        proc, conv = self.proc, self.conv
        assert proc is not None and conv is not None
        code = proc.proc.wait()
        if conv.parser.pending_bytes:
            raise WorkerError(
                f"protocol violation by {self.label}: its last {conv.parser.pending_bytes} bytes were not ended by EOM",
                proc.context(),
            )
        if code != 0:
            raise proc.gone(f"exited with status {code} (a plain E-worker ends with 0)")
        proc.kill()  # releases the pipes; the process has exited
        self.proc = None
        return True

    # --- E on an executor: one request, its messages --------------------------------------------

    def cycle(self, request: bytes) -> bytes:
        """Send one cycle request; the messages it answered (held until EOP).

        A failure restarts the worker and sends the request again, at most
        ``max_restarts`` times in a row.
        """
        while True:
            job: Job[Messages] = Job(pieces=[Messages(request + self.eom, 1)])
            try:
                self._ensure()
                self._hold()
                self._nothing_unasked()
                self._write(job, job.block)
                while True:
                    done = self._step()
                    if done:
                        self.restarts.succeeded()
                        return b"".join(job.results)
            except WorkerError as exc:
                self.stop_if_broken(exc)
                self.kill()
                self.failed(exc)
                delay, note = self.restarts.failed(exc)
                log.warning("%s", note)
                time.sleep(delay)

    def _went_early(self) -> str:
        assert self.conv is not None
        cycle = self.conv.outstanding[0] if self.conv.outstanding else None
        if cycle is None:  # waiting for its next request
            return EXITED_BETWEEN_CYCLES
        return cycle_cut_short(bool(cycle.results) or self.conv.parser.pending_bytes > 0)

    def _nothing_unasked(self) -> None:
        """Before a request: what the worker wrote since its last EOP, as the supervisor checks it."""
        proc, conv = self.proc, self.conv
        assert proc is not None and conv is not None
        tokens: list[Token] = []
        for chunk in proc.pump(self.pending, time.monotonic(), None):  # what has come, no wait
            try:
                tokens.extend(conv.heard(chunk, proc.last_output))
            except ProtocolViolation as exc:
                raise self._violation(exc) from None
        unasked = unasked_before_request(tokens)
        if unasked is not None:
            raise self._violation(unasked)
        if proc.eof:
            raise proc.gone(EXITED_BETWEEN_CYCLES)


__all__ = ["ExtractWorker"]
