"""Multi-message sequences: parts stored durably as they arrive, one message out when complete.

How fragments are joined: the spec's producer serialises the whole messageBody to one string
and cuts it into consecutive slices; each part carries its slice as its ``messageBody`` (a
JSON string).  We concatenate the slices in ``position`` order and parse the result — JSON
first, and, because the spec's own example producer serialises with Python's ``str()``,
a Python literal (``ast.literal_eval``, literals only) if that fails.  The reassembled
message gets the header of part 1 (its messageId, so every replay yields the same id) with
``messageSequence`` set to ``{"sequence": S, "position": 1, "total": 1}``, and is then
validated as a whole message (body schema chosen by messageType, expiry).

Replays: a sequence stays ``EMITTED`` (with its result) for the retention period; any part of
it arriving again re-emits the result, at most once per batch.  The loader de-duplicates
by messageId, so a replayed window is neither lost nor doubled.
"""

from __future__ import annotations

import ast
import hashlib
import json
import time
from typing import Any

from etlstage_workers.rdss.codes import GENERR004, GENERR007, GENERR009
from etlstage_workers.rdss.ldr import EMITTED, TIMED_OUT, LocalDataRepository
from etlstage_workers.rdss.output import decorate, dumps, error_result
from etlstage_workers.rdss.validate import MessageValidator, Verdict


def input_key(raw: bytes) -> bytes:
    return hashlib.blake2b(raw, digest_size=16).digest()


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def join_fragments(fragments: list[str]) -> tuple[Any, str | None]:
    """``(body, None)`` or ``(None, why not)``.

    >>> join_fragments(['{"a": [1, ', '2]}'])
    ({'a': [1, 2]}, None)
    >>> join_fragments(["{'a': True", "}"])
    ({'a': True}, None)
    """
    text = "".join(fragments)
    try:
        return json.loads(text), None
    except ValueError as exc:
        json_error = str(exc)
    if text.lstrip()[:1] in ("{", "["):
        try:
            return ast.literal_eval(text), None
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
    return (
        None,
        f"messageBody: the {len(fragments)} joined fragments ({len(text)} characters) are not JSON: {json_error}",
    )


class Reassembler:
    def __init__(self, ldr: LocalDataRepository, validator: MessageValidator, timeout_s: float) -> None:
        self.ldr = ldr
        self.validator = validator
        self.timeout_s = timeout_s
        self.replay_keys = ldr.replay_keys()  # small: inputs of batches that emitted timed-out sequences
        self.completed = 0
        self.duplicate_parts = 0
        self.timed_out = 0

    def add(self, raw: bytes, verdict: Verdict, now: float, emitted: set[str]) -> list[bytes]:
        """Store one valid part; return what it produces now (usually nothing)."""
        header = verdict.header
        seq = header["messageSequence"]
        sequence, position, total = seq["sequence"], seq["position"], seq["total"]
        row = self.ldr.sequence(sequence)
        if row is None:
            self.ldr.open_sequence(sequence, total, now)
            known_total, status, result = total, "OPEN", None
        else:
            known_total, status, _, result = row
        if status == EMITTED:
            self.duplicate_parts += 1
            if sequence in emitted:
                return []
            emitted.add(sequence)
            return [result] if result is not None else []
        if status == TIMED_OUT:
            why = (
                f"messageHeader.messageSequence: part {position}/{total} of sequence {sequence} "
                "arrived after the sequence timed out"
            )
            return [error_result(raw, verdict.doc, GENERR009, why)]
        if total != known_total:
            why = (
                f"messageHeader.messageSequence.total: {total} disagrees with total {known_total} of the parts of "
                f"sequence {sequence} received before"
            )
            return [error_result(raw, verdict.doc, GENERR004, why)]
        existing = self.ldr.part(sequence, position)
        if existing is not None:
            old_id, old_raw = existing
            old_doc = json.loads(old_raw)
            if old_doc.get("messageBody") == verdict.doc.get("messageBody"):
                self.duplicate_parts += 1
                return []
            why = (
                f"messageHeader.messageSequence.position: part {position} of sequence {sequence} was already received "
                f"with a different fragment (messageId {old_id})"
            )
            return [error_result(raw, verdict.doc, GENERR004, why)]
        self.ldr.add_part(sequence, position, header.get("messageId"), raw, now)
        if self.ldr.part_count(sequence) < known_total:
            return []
        result = self.assemble(sequence, known_total, now)
        self.ldr.set_status(sequence, EMITTED, now, result)
        emitted.add(sequence)
        self.completed += 1
        return [result]

    def assemble(self, sequence: str, total: int, now: float) -> bytes:
        docs = [json.loads(raw) for _, raw in self.ldr.parts(sequence)]
        header = dict(docs[0]["messageHeader"])
        header["messageSequence"] = {"sequence": sequence, "position": 1, "total": 1}
        body, why = join_fragments([d["messageBody"] for d in docs])
        if why is not None:
            doc = {"messageHeader": header, "messageBody": None, "rawPayload": "".join(d["messageBody"] for d in docs)}
            return dumps(decorate(doc, GENERR007, f"{why} (reassembled from {total} parts of sequence {sequence})"))
        doc = {"messageHeader": header, "messageBody": body}
        verdict = self.validator.check_doc(doc, now, whole=True)
        if verdict.code is not None:
            why = f"{verdict.description} (reassembled from {total} parts of sequence {sequence})"
            return error_result(b"", doc, verdict.code, why)
        return dumps(doc)

    # -- timeouts -----------------------------------------------------------------------
    def sweep(self, now: float, keys: list[bytes]) -> list[bytes]:
        """Sequences open for longer than the timeout: every stored part goes on with GENERR009."""
        overdue = self.ldr.overdue(now - self.timeout_s)
        out: list[bytes] = []
        for sequence, _total, _first in overdue:
            out.extend(self.timed_out_parts(sequence))
            self.ldr.set_status(sequence, TIMED_OUT, now)
            self.timed_out += 1
        if overdue:
            self.ldr.add_replay_keys(keys, [s for s, _, _ in overdue], now)
            self.replay_keys.update(keys)
        return out

    def timed_out_parts(self, sequence: str) -> list[bytes]:
        row = self.ldr.sequence(sequence)
        assert row is not None
        total, _status, first_seen, _ = row
        parts = self.ldr.parts(sequence)
        have = [p for p, _ in parts]
        why = (
            f"messageHeader.messageSequence: sequence {sequence} incomplete after the timeout of {self.timeout_s:g} s "
            f"(first part received {_iso(first_seen)}): have positions {have} of total {total}"
        )
        out = []
        for _, raw in parts:
            doc, _err = self.validator.parse(raw)
            out.append(error_result(raw, doc, GENERR009, why))
        return out

    def replays(self, keys: list[bytes]) -> list[bytes]:
        """A batch that once emitted timed-out sequences came again (a replay): emit them again."""
        hits = [k for k in keys if k in self.replay_keys]
        if not hits:
            return []
        out: list[bytes] = []
        for sequence in self.ldr.sequences_for_keys(hits):
            out.extend(self.timed_out_parts(sequence))
        return out
