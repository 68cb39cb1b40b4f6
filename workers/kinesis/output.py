"""Kinesis records -> protocol messages.

Default: the record's data is the message (an RDSS JSON message, say).  ``--envelope``:
one compact JSON object per user record::

    {"data":"aGk=","dataEncoding":"base64","partitionKey":"k","sequenceNumber":"4962...",
     "subSequenceNumber":0,"shardId":"shardId-000000000000","approximateArrivalTimestamp":1700000000000}

A record whose bytes hold one of the stage's marker bytes must neither desynchronise the
stream nor vanish.  JSON data is re-serialised compactly with ``ensure_ascii`` (so no raw
control byte is left: a trailing newline simply goes); anything else follows
``on_marker``: ``envelope`` (base64 envelope, the default), ``error`` (an error object the
next stage can route), or ``fail`` (stop; nothing is committed, so nothing is lost).
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from etlstage_workers.kinesis.kpl import MAGIC, deaggregate, payloads

from etlstage.errors import MarkerInMessage
from etlstage.protocol.markers import Markers

log = logging.getLogger("etlstage.kinesis")

ON_MARKER = ("envelope", "error", "fail")
DATA_ENCODINGS = ("auto", "utf8", "base64")


@dataclass(frozen=True)
class Position:
    """The last user record framed: a checkpoint candidate."""

    seq: str
    subseq: int
    complete: bool  # every sub-record of ``seq`` is behind us


class Framer:
    def __init__(
        self,
        markers: Markers,
        *,
        envelope: bool = False,
        data_encoding: str = "auto",
        on_marker: str = "envelope",
        deaggregate_kpl: bool = True,
    ) -> None:
        if on_marker not in ON_MARKER:
            raise ValueError(f"on_marker {on_marker!r}: expected one of {', '.join(ON_MARKER)}")
        if data_encoding not in DATA_ENCODINGS:
            raise ValueError(f"data_encoding {data_encoding!r}: expected one of {', '.join(DATA_ENCODINGS)}")
        self.markers = markers
        self.envelope = envelope
        self.data_encoding = data_encoding
        self.on_marker = on_marker
        self.deaggregate = deaggregate_kpl
        self._eom = markers.EOM
        self._others = (markers.EOP, markers.EOB, markers.BNC)
        self.escaped = 0  # records re-serialised or enveloped because of a marker byte
        self._notes = 0

    # --- the batch of one GetRecords call -----------------------------------------------

    def frame(
        self, shard_id: str, records: Sequence[dict[str, Any]], after: tuple[int, int] | None = None
    ) -> tuple[list[bytes], Position | None]:
        """Messages for ``records`` (in order) and the position of the last one.

        ``after``: skip user records at or before this (sequence, sub-sequence) — used
        when resuming inside an aggregated record.
        """
        if not records:
            return [], None
        out: list[bytes] = []
        last = records[-1]
        last_sub = 0
        if not self.envelope and after is None:
            # fast path: data only
            for r in records:
                data = r["Data"]
                if self.deaggregate and data[:4] == MAGIC:
                    datas = payloads(data)
                    out.extend(datas)
                    if r is last:
                        last_sub = len(datas) - 1
                else:
                    out.append(data)
                    if r is last:
                        last_sub = 0
            self._repair(shard_id, records, out)
        else:
            for r in records:
                subs = self._subs(r)
                seqn = int(r["SequenceNumber"])
                for sub, key, data in subs:
                    if after is not None and (seqn, sub) <= after:
                        continue
                    if self.envelope:
                        out.append(self._envelope(shard_id, r, sub, key, data))
                    else:
                        out.append(self._safe_data(shard_id, r, sub, key, data))
                if r is last:
                    last_sub = len(subs) - 1
        return out, Position(last["SequenceNumber"], last_sub, True)

    def _subs(self, r: dict[str, Any]) -> list[tuple[int, str, bytes]]:
        data = r["Data"]
        if self.deaggregate and data[:4] == MAGIC:
            return deaggregate(data, r["PartitionKey"])
        return [(0, r["PartitionKey"], data)]

    # --- marker handling ----------------------------------------------------------------

    def _clean(self, block: bytes, n: int) -> bool:
        if block.count(self._eom) != n:
            return False
        return not any(m in block for m in self._others)

    def _repair(self, shard_id: str, records: Sequence[dict[str, Any]], out: list[bytes]) -> None:
        """Fast check over the whole batch; only a dirty batch is walked record by record."""
        if self._clean(self._eom.join(out) + self._eom, len(out)):
            return
        i = 0
        for r in records:
            for sub, key, data in self._subs(r):
                if not self._clean(data + self._eom, 1):
                    out[i] = self._safe_data(shard_id, r, sub, key, data)
                i += 1

    def _safe_data(self, shard_id: str, r: dict[str, Any], sub: int, key: str, data: bytes) -> bytes:
        if self._clean(data + self._eom, 1):
            return data
        self.escaped += 1
        where = f"record {r['SequenceNumber']}/{sub} of {shard_id}"
        try:
            doc = json.loads(data)
        except ValueError:
            doc = None
        else:
            compact = json.dumps(doc, separators=(",", ":"), ensure_ascii=True).encode("ascii")
            if self._clean(compact + self._eom, 1):
                self._note(logging.INFO, f"{where} holds a marker byte; its JSON was re-serialised compactly")
                return compact
        if self.on_marker == "fail":
            raise MarkerInMessage(
                f"{where} (partition key {key!r}) holds a marker byte of this stage and is not JSON; "
                "stopping with nothing committed (use --on-marker envelope or error, or --envelope)",
                data[:80],
            )
        if self.on_marker == "error":
            doc = self._envelope_doc(shard_id, r, sub, key, data, force_base64=True)
            doc = {"error": "KINESIS_MARKER_IN_DATA", "description": f"{where} holds a marker byte", **doc}
            self._note(logging.WARNING, f"{where} holds a marker byte and is not JSON: sent on as an error object")
            return self._dump(doc, where)
        self._note(logging.WARNING, f"{where} holds a marker byte and is not JSON: sent on as a base64 envelope")
        return self._dump(self._envelope_doc(shard_id, r, sub, key, data, force_base64=True), where)

    def _note(self, level: int, text: str) -> None:
        """Log the first few, then every 1000th: JSON lines ending in a newline are common."""
        self._notes += 1
        n = self._notes
        if n <= 10 or n % 1000 == 0:
            more = "" if n < 10 else f" ({n} records so far; only every 1000th is logged from now on)"
            log.log(level, "%s%s", text, more)

    # --- envelope -----------------------------------------------------------------------

    def _envelope_doc(
        self, shard_id: str, r: dict[str, Any], sub: int, key: str, data: bytes, force_base64: bool = False
    ) -> dict[str, Any]:
        text: str | None = None
        if not force_base64 and self.data_encoding != "base64":
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                if self.data_encoding == "utf8":
                    raise MarkerInMessage(
                        f"record {r['SequenceNumber']}/{sub} of {shard_id} is not UTF-8 "
                        "but --data-encoding utf8 was asked for (use auto or base64)",
                        data[:80],
                    ) from None
        arrival = r.get("ApproximateArrivalTimestamp")
        if isinstance(arrival, datetime):
            arrival = int(arrival.timestamp() * 1000)
        return {
            "data": text if text is not None else base64.b64encode(data).decode("ascii"),
            "dataEncoding": "utf8" if text is not None else "base64",
            "partitionKey": key,
            "sequenceNumber": r["SequenceNumber"],
            "subSequenceNumber": sub,
            "shardId": shard_id,
            "approximateArrivalTimestamp": arrival,
        }

    def _envelope(self, shard_id: str, r: dict[str, Any], sub: int, key: str, data: bytes) -> bytes:
        where = f"record {r['SequenceNumber']}/{sub} of {shard_id}"
        return self._dump(self._envelope_doc(shard_id, r, sub, key, data), where)

    def _dump(self, doc: dict[str, Any], where: str) -> bytes:
        raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=True).encode("ascii")
        if not self._clean(raw + self._eom, 1):
            raise MarkerInMessage(
                f"{where}: even its JSON envelope holds a marker byte of this stage "
                "(a printable marker such as '|' or '{' clashes with JSON); choose control bytes as markers",
                raw[:80],
            )
        return raw
