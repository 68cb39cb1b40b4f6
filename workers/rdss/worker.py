"""The RDSS T-worker: validate every message, reassemble sequences, decorate failures.

``process`` takes a batch (one message in single mode) and returns one result per input
(zero for a stored sequence part, one for the part that completes its sequence), in input
order, then any timed-out sequences.  Every input reaches the output in some form: valid,
decorated with its error code, or stored as a part that a later batch emits.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from etlstage_workers.rdss.codes import GENERR009, queue_of
from etlstage_workers.rdss.ldr import LocalDataRepository
from etlstage_workers.rdss.output import derived_message_id, error_result, passthrough
from etlstage_workers.rdss.reassembly import Reassembler, input_key
from etlstage_workers.rdss.schemas import DEFAULT_SPEC, load_schema_set
from etlstage_workers.rdss.validate import DEFAULT_MAX_BYTES, MessageValidator, Verdict

from etlstage.worker import Transformer
from etlstage.worker.sqlite import immediate

log = logging.getLogger("etlstage.rdss")

DEFAULT_SEQUENCE_TIMEOUT_S = 3600.0
DEFAULT_RETENTION_S = 168 * 3600.0  # the Kinesis stream's maximum retention: nothing older can be replayed
PURGE_EVERY_S = 60.0
LDR_FILE = "rdss-ldr.sqlite"


@dataclass
class Options:
    spec: str = DEFAULT_SPEC
    schema_dir: str | None = None
    max_bytes: int = DEFAULT_MAX_BYTES
    check_expiry: bool = True
    sequence_timeout_s: float = DEFAULT_SEQUENCE_TIMEOUT_S
    retention_s: float = DEFAULT_RETENTION_S
    state_dir: str | None = None  # default: ETLSTAGE_STATE_DIR, else .etlstage-rdss
    log_messages: bool = False  # one INFO line per message (the spec's "all messages MUST be logged")


@dataclass
class Counters:
    received: int = 0
    valid: int = 0
    batch_duplicates: int = 0  # exact copies inside one batch, dropped (same fate)
    seen_before: int = 0  # messageId already in the LDR: processed again, never dropped
    parts: int = 0
    by_code: dict[str, int] = field(default_factory=dict)


class RdssTransformer(Transformer):
    def __init__(self, options: Options | None = None, clock: Callable[[], float] = time.time) -> None:
        self.options = options or Options()
        self.clock = clock
        self.counters = Counters()

    def setup(self) -> None:
        o = self.options
        schemas = load_schema_set(o.spec, o.schema_dir)
        self.validator = MessageValidator(schemas, max_bytes=o.max_bytes, check_expiry=o.check_expiry, clock=self.clock)
        state_dir = (
            o.state_dir
            or getattr(getattr(self, "scenario", None), "state_dir", "")
            or os.environ.get("ETLSTAGE_STATE_DIR", "")
            or ".etlstage-rdss"
        )
        self.ldr = LocalDataRepository(Path(state_dir) / LDR_FILE)
        self.reassembler = Reassembler(self.ldr, self.validator, o.sequence_timeout_s)
        self._last_purge = 0.0
        log.info(
            "RDSS worker ready: spec %s, schemas %s, LDR %s, max %d bytes, sequence timeout %gs, retention %gs",
            schemas.spec,
            schemas.source,
            self.ldr.path,
            o.max_bytes,
            o.sequence_timeout_s,
            o.retention_s,
        )

    def teardown(self) -> None:
        c = self.counters
        log.info(
            "RDSS worker done: %d received, %d valid, %d parts, %d duplicate copies in a batch, %d seen before, "
            "%d sequences completed, %d timed out, errors %s",
            c.received,
            c.valid,
            c.parts,
            c.batch_duplicates,
            c.seen_before,
            self.reassembler.completed,
            self.reassembler.timed_out,
            c.by_code or "none",
        )
        self.ldr.close()

    def report(self) -> dict[str, object]:
        """This process's counts, for the supervisor's end-of-run summary."""
        c = self.counters
        return {
            "messages": c.received + c.batch_duplicates,
            "valid": c.valid,
            "errors": dict(c.by_code),
            "sequence parts": c.parts,
            "sequences reassembled": self.reassembler.completed,
            "copies dropped": c.batch_duplicates,
        }

    def process(self, messages: list[bytes]) -> list[bytes]:
        now = self.clock()
        unique: list[bytes] = []
        copies: set[bytes] = set()
        for raw in messages:
            if raw in copies:  # an exact copy in the same batch has the same fate: one result is enough
                self.counters.batch_duplicates += 1
                continue
            copies.add(raw)
            unique.append(raw)
        # Validate and serialise before taking the LDR's write lock (instances may share the file), one
        # message at a time: a parsed document dies with its message, so a batch of them never sits in
        # memory at once (the garbage collector would spend a fifth of the batch walking them).  Only a
        # valid sequence part keeps its verdict, for the reassembler inside the transaction.
        results: list[bytes | tuple[bytes, Verdict]] = []
        rows: list[tuple[Any, ...]] = []
        tally = _Tally()
        for raw in unique:
            v = self._check(raw, now)
            row = _ldr_row(raw, v)
            rows.append(row)
            if v.part:
                tally.parts += 1
                results.append((raw, v))
            elif v.code is None:
                tally.valid += 1
                results.append(passthrough(raw, v.doc))
            else:
                own_id = isinstance(v.header.get("messageId"), str)
                tally.invalid.append((row[0] if own_id else f"{row[0]} (derived)", v.code, v.description))
                results.append(error_result(raw, v.doc, v.code, v.description or v.code))
            if self.options.log_messages:
                log.info("Message received: %s (%d bytes)", v.header.get("messageId"), len(raw))
        ldr = self.ldr
        # Parts must survive even a power loss once acknowledged; other rows are bookkeeping.
        ldr.db.execute(f"PRAGMA synchronous={'FULL' if tally.parts else 'NORMAL'}")
        with immediate(ldr.db):
            known = ldr.known_ids([r[0] for r in rows])
            ldr.record(rows, now)
            out = self._reassemble(results, now)
            keys: list[bytes] = []
            if self.reassembler.replay_keys:
                keys = [input_key(raw) for raw in unique]
                out.extend(self.reassembler.replays(keys))
            if ldr.overdue(now - self.options.sequence_timeout_s):
                out.extend(self.reassembler.sweep(now, keys or [input_key(raw) for raw in unique]))
            if now - self._last_purge >= PURGE_EVERY_S:
                self._last_purge = now
                ldr.purge(now - self.options.retention_s)
        self._count(tally, [r[0] for r in rows], known)
        return out

    def _reassemble(self, results: list[bytes | tuple[bytes, Verdict]], now: float) -> list[bytes]:
        """``results`` with each sequence part replaced by what it produces (usually nothing), in order."""
        out: list[bytes] = []
        emitted: set[str] = set()
        for r in results:
            if isinstance(r, bytes):
                out.append(r)
            else:
                raw, verdict = r
                out.extend(self.reassembler.add(raw, verdict, now, emitted))
        return out

    def _check(self, raw: bytes, now: float) -> Verdict:
        try:
            return self.validator.check(raw, now)
        except Exception as exc:
            log.exception("unexpected error validating a message of %d bytes", len(raw))
            return Verdict(None, GENERR009, f"message: unexpected error while validating: {type(exc).__name__}: {exc}")

    def _count(self, tally: _Tally, ids: list[str], known: set[str]) -> None:
        c = self.counters
        c.received += tally.parts + tally.valid + len(tally.invalid)
        c.parts += tally.parts
        c.valid += tally.valid
        seen = sum(1 for i in ids if i in known) + (len(ids) - len(set(ids)))
        c.seen_before += seen
        for mid, code, description in tally.invalid:
            c.by_code[code] = c.by_code.get(code, 0) + 1
            log.warning("Message %s to the %s queue: %s %s", mid, queue_of(code), code, description)
        if seen:
            log.info("%d message(s) with a messageId seen before: processed again (the loader de-duplicates)", seen)


@dataclass
class _Tally:
    """One batch's outcomes, added to the counters (and logged) once its transaction commits."""

    valid: int = 0
    parts: int = 0
    invalid: list[tuple[str, str, str | None]] = field(default_factory=list)  # (messageId, code, description)


def _ldr_row(raw: bytes, v: Verdict) -> tuple[Any, ...]:
    """The LDR's record of one message: (messageId, messageClass, messageType, sequence, position, outcome)."""
    h = v.header
    seq_value = h.get("messageSequence")
    seq: dict[str, Any] = seq_value if isinstance(seq_value, dict) else {}
    mid = h.get("messageId")
    if not isinstance(mid, str):  # recorded under the id its wrapped result carries
        mid = derived_message_id(raw)
    position = seq.get("position")
    return (
        mid,
        _text(h.get("messageClass")),
        _text(h.get("messageType")),
        _text(seq.get("sequence")),
        position if type(position) is int else None,
        "part" if v.part else (v.code or "valid"),
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
