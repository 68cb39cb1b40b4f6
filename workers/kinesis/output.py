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
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from etlstage_workers.kinesis.kpl import MAGIC, deaggregate, payloads
from etlstage_workers.markersafe import DATA_ENCODINGS, MarkerGuard

from etlstage.errors import MarkerInMessage
from etlstage.protocol.markers import Markers

log = logging.getLogger("etlstage.kinesis")


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
        if data_encoding not in DATA_ENCODINGS:
            raise ValueError(f"data_encoding {data_encoding!r}: expected one of {', '.join(DATA_ENCODINGS)}")
        self.markers = markers
        self.envelope = envelope
        self.data_encoding = data_encoding
        self.guard = MarkerGuard(markers, on_marker, "KINESIS_MARKER_IN_DATA", log)
        self.deaggregate = deaggregate_kpl
        self._eom = markers.EOM

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

    @property
    def escaped(self) -> int:
        """Records re-serialised or enveloped because of a marker byte."""
        return self.guard.escaped

    def _repair(self, shard_id: str, records: Sequence[dict[str, Any]], out: list[bytes]) -> None:
        """Fast check over the whole batch; only a dirty batch is walked record by record."""
        if self.guard.clean(self._eom.join(out) + self._eom, len(out)):
            return
        i = 0
        for r in records:
            for sub, key, data in self._subs(r):
                if not self.guard.clean(data + self._eom, 1):
                    out[i] = self._safe_data(shard_id, r, sub, key, data)
                i += 1

    def _safe_data(self, shard_id: str, r: dict[str, Any], sub: int, key: str, data: bytes) -> bytes:
        return self.guard.safe(
            data,
            f"record {r['SequenceNumber']}/{sub} of {shard_id}",
            lambda: self._envelope_doc(shard_id, r, sub, key, data, force_base64=True),
            who=f" (partition key {key!r})",
        )

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
        return self.guard.dump(self._envelope_doc(shard_id, r, sub, key, data), where)
