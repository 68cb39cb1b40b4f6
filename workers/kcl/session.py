"""One shard's conversation with its MLD child, playing the MultiLangDaemon.

Every action is one line to the child, then lines back until the ``status`` whose
``responseFor`` names that action.  Meanwhile the child may print (logged, like the
KCL does: "skipping unexpected line") and may ask for checkpoints, which are answered
here with the KCL's own rules (``ShardRecordProcessorCheckpointer``):

* no sequence number: checkpoint at the largest record delivered so far
  (at ``shardEnded``/``shutdown TERMINATE``: at ``SHARD_END``);
* a sequence number must be a decimal string, the sub-sequence number an integer >= 0
  (absent: 0), and the pair must lie between the last checkpoint and the largest record
  delivered — otherwise ``IllegalArgumentException``, as the KCL sends;
* while no checkpointer exists (``initialize``, ``leaseLost``, V1 ``shutdown ZOMBIE``):
  ``InvalidStateException`` (V1 ZOMBIE: ``ShutdownException``).

A successful checkpoint is written to the store before the answer goes out.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence

from etlstage_workers.kcl import wire
from etlstage_workers.kcl.child import MldChild
from etlstage_workers.kcl.errors import ChildProtocolError
from etlstage_workers.kcl.records import Record
from etlstage_workers.kcl.store import CheckpointStore

log = logging.getLogger("etlstage.kcl.session")

SHARD_END = "SHARD_END"
TRIM_HORIZON = "TRIM_HORIZON"
ILLEGAL = "IllegalArgumentException"
INVALID_STATE = "InvalidStateException"
SHUTDOWN = "ShutdownException"


class ShardSession:
    def __init__(
        self,
        argv: list[str],
        shard_id: str,
        store: CheckpointStore,
        version: int,
        timeout: float,
        shutdown_timeout: float,
        legacy_shutdown: bool = False,
    ) -> None:
        self.shard_id = shard_id
        self.legacy_shutdown = legacy_shutdown
        self.store = store
        self.version = version
        self.timeout = timeout
        self.shutdown_timeout = shutdown_timeout
        self.largest: tuple[int, int] | None = None
        self._largest_seq = ""  # the largest record's sequence number as delivered (text)
        self.checkpoints = 0
        self.records_delivered = 0
        stored = store.get(shard_id)
        self.last_checkpoint = _key(stored) if stored else None
        self.child = MldChild(argv, shard_id)
        seq, sub = stored if stored else (TRIM_HORIZON, 0)
        try:
            self._exchange(wire.initialize(version, shard_id, seq, sub), "initialize", self.timeout, checkpointer=None)
        except BaseException:
            self.child.kill()  # not registered yet, so nobody else would
            raise

    # --- the actions ---------------------------------------------------------------------

    def process_records(self, records: Sequence[Record], millis_behind: int) -> None:
        if not records:
            return
        top = max(records, key=_record_key)
        if self.largest is None or top.key > self.largest:
            self.largest = top.key
            self._largest_seq = top.sequence_number
        self.records_delivered += len(records)
        self._exchange(wire.process_records(self.version, records, millis_behind), "processRecords", self.timeout)

    def shard_ended(self) -> bool:
        """Send shardEnded (V1: shutdown TERMINATE); True when the child checkpointed SHARD_END."""
        before = self.last_checkpoint
        data, expect = wire.shard_ended(self.version, self.legacy_shutdown)
        self._exchange(data, expect, self.timeout, at_shard_end=True)
        ended = self.last_checkpoint == _SHARD_END_KEY
        if not ended:
            log.warning(
                "%s: the record processor did not checkpoint at SHARD_END during %s (last checkpoint %s); "
                "the KCL would offer the shard end again — etlstage has acknowledged the records by status",
                self.shard_id,
                expect,
                before,
            )
        self._close()
        return ended

    def shutdown(self, send_shutdown_requested: bool) -> None:
        """No more work: shutdownRequested (may checkpoint), then leaseLost (V1: shutdown ZOMBIE)."""
        if send_shutdown_requested:
            data, expect = wire.shutdown_requested()
            self._exchange(data, expect, self.shutdown_timeout)
        data, expect = wire.lease_lost(self.version, self.legacy_shutdown)
        self._exchange(data, expect, self.shutdown_timeout, checkpointer=None)
        self._close()

    def kill(self) -> None:
        self.child.kill()

    def _close(self) -> None:
        code = self.child.close_and_wait(self.shutdown_timeout)
        if code:
            log.warning("%s exited with status %s after its last status", self.child.describe(), code)

    # --- the exchange --------------------------------------------------------------------

    def _exchange(
        self, data: bytes, expect: str, timeout: float, checkpointer: object = True, at_shard_end: bool = False
    ) -> None:
        deadline = time.monotonic() + timeout
        what = f"the status of {expect}"
        self.child.send(data, deadline, what)
        while True:
            raw = self.child.read_line(deadline, what)
            text = raw.strip()
            if not text:
                continue  # amazon_kclpy frames its lines as "\n{json}\n"
            try:
                doc = json.loads(text)
            except ValueError:
                doc = None
            action = doc.get("action") if isinstance(doc, dict) else None
            if action == "status":
                got = doc.get("responseFor")
                if got != expect:
                    raise ChildProtocolError(
                        f"{self.child.describe()} answered with status for {got!r} while the adapter waited for "
                        f"the status of {expect!r}: {text[:200]!r}"
                    )
                return
            if action == "checkpoint":
                answer = self._checkpoint(doc, checkpointer is not None, at_shard_end, expect)
                self.child.send(answer, deadline, f"the checkpoint answer during {expect}")
                continue
            log.info("%s: %s", self.shard_id, text[:1000].decode("utf-8", "replace"))

    def _checkpoint(self, doc: dict, allowed: bool, at_shard_end: bool, during: str) -> bytes:
        seq = doc.get("sequenceNumber", doc.get("checkpoint"))
        sub = doc.get("subSequenceNumber")
        target = self._checkpoint_target(seq, sub, allowed, at_shard_end, during)
        error = target if isinstance(target, str) else None
        if error:
            log.warning(
                "%s: checkpoint at %r/%r during %s refused with %s (last checkpoint %s, largest delivered %s)",
                self.shard_id,
                seq,
                sub,
                during,
                error,
                self.last_checkpoint,
                self.largest,
            )
        elif target is not None:
            self._record(*target)
        return wire.checkpoint_answer(self.version, seq, sub, error)

    def _checkpoint_target(
        self, seq: object, sub: object, allowed: bool, at_shard_end: bool, during: str
    ) -> tuple[str, int, tuple[int, int]] | str | None:
        """Where to checkpoint — (sequence number, sub, key) — or the KCL exception name,
        or None for a checkpoint that changes nothing."""
        if not allowed:
            return SHUTDOWN if during == "shutdown" else INVALID_STATE  # KCL 1.x: ZOMBIE
        if sub is None:
            sub = 0
        if not isinstance(sub, int) or isinstance(sub, bool) or sub < 0:
            return ILLEGAL
        if seq is None:
            if at_shard_end:
                return SHARD_END, 0, _SHARD_END_KEY
            if self.largest is None:
                return None  # nothing delivered yet: the KCL checkpoints at the value it already has
            return self._largest_seq, self.largest[1], self.largest
        if seq == SHARD_END and at_shard_end:
            return SHARD_END, 0, _SHARD_END_KEY
        if not isinstance(seq, str) or not seq.isdigit():
            return ILLEGAL
        key = (int(seq), sub)
        upper = _SHARD_END_KEY if at_shard_end else self.largest
        if upper is None or key > upper or (self.last_checkpoint is not None and key < self.last_checkpoint):
            return ILLEGAL
        return seq, sub, key

    def _record(self, seq: str, sub: int, key: tuple[int, int]) -> None:
        """Written to the store before the answer goes out."""
        self.store.put(self.shard_id, seq, sub)
        self.last_checkpoint = key
        self.checkpoints += 1
        log.debug("%s: checkpoint at %s/%d", self.shard_id, seq, sub)


_SHARD_END_KEY = (1 << 256, 0)  # above every Kinesis sequence number (they fit in 128 bits)


def _key(stored: tuple[str, int]) -> tuple[int, int] | None:
    seq, sub = stored
    if seq == SHARD_END:
        return _SHARD_END_KEY
    return (int(seq), sub) if seq.isdigit() else None


def _record_key(r: Record) -> tuple[int, int]:
    return r.key
