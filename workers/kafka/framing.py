"""Kafka records -> protocol messages.

Default: a record's value is the message, byte for byte. ``--envelope``: one compact JSON
object per record (docs/workers/kafka.md)::

    {"topic":"orders","partition":2,"offset":41,"timestamp":1700000000123,"timestampType":"create",
     "key":"k1","keyEncoding":"utf8","headers":[["trace","abc","utf8"]],"data":"{...}","dataEncoding":"utf8"}

A value holding one of the stage's marker bytes never desynchronises the stream nor
vanishes: as for the Kinesis extractor, JSON is re-serialised compactly (no raw control
byte is left), anything else follows ``on_marker``: ``envelope`` (base64 envelope),
``error`` (the envelope plus ``"error": "KAFKA_MARKER_IN_DATA"``) or ``fail`` (stop with
nothing committed).
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any, Protocol

from etlstage.errors import MarkerInMessage
from etlstage.protocol.markers import Markers

log = logging.getLogger("etlstage.kafka")

ON_MARKER = ("envelope", "error", "fail")
DATA_ENCODINGS = ("auto", "utf8", "base64")
TIMESTAMP_TYPES = {0: None, 1: "create", 2: "logAppend"}


class Record(Protocol):
    """What the framer reads of a ``confluent_kafka.Message``."""

    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def headers(self) -> list[tuple[str, bytes | None]] | None: ...
    def timestamp(self) -> tuple[int, int]: ...


def where(r: Record) -> str:
    return f"offset {r.offset()} of {r.topic()}/{r.partition()}"


class Framer:
    def __init__(
        self, markers: Markers, *, envelope: bool = False, data_encoding: str = "auto", on_marker: str = "envelope"
    ) -> None:
        self.markers = markers
        self.envelope = envelope
        self.data_encoding = data_encoding
        self.on_marker = on_marker
        self._eom = markers.EOM
        self._others = (markers.EOP, markers.EOB, markers.BNC)
        self.escaped = 0
        self._notes = 0

    def frame(self, records: list[Record]) -> list[bytes]:
        """One message per record, in order."""
        if self.envelope:
            return [self._dump(self.envelope_doc(r), r) for r in records]
        out = [r.value() or b"" for r in records]
        block = b"".join(out)
        if self._eom in block or any(m in block for m in self._others):  # memchr scans of the whole cycle
            out = [self._safe(r, v) for r, v in zip(records, out, strict=True)]
        return out

    # --- marker handling ----------------------------------------------------------------

    def _clean(self, block: bytes, n: int) -> bool:
        return block.count(self._eom) == n and not any(m in block for m in self._others)

    def _safe(self, r: Record, data: bytes) -> bytes:
        if self._clean(data + self._eom, 1):
            return data
        self.escaped += 1
        try:
            doc = json.loads(data)
        except ValueError:
            pass
        else:
            compact = json.dumps(doc, separators=(",", ":"), ensure_ascii=True).encode("ascii")
            if self._clean(compact + self._eom, 1):
                self._note(logging.INFO, f"{where(r)} holds a marker byte; its JSON was re-serialised compactly")
                return compact
        if self.on_marker == "fail":
            raise MarkerInMessage(
                f"{where(r)} holds a marker byte of this stage and is not JSON; stopping with nothing "
                "committed (use --on-marker envelope or error, or --envelope)",
                data[:80],
            )
        doc = self.envelope_doc(r, force_base64=True)
        if self.on_marker == "error":
            doc = {"error": "KAFKA_MARKER_IN_DATA", "description": f"{where(r)} holds a marker byte", **doc}
        self._note(logging.WARNING, f"{where(r)} holds a marker byte and is not JSON: sent on as {self.on_marker}")
        return self._dump(doc, r)

    def _note(self, level: int, text: str) -> None:
        """The first few, then every 1000th."""
        self._notes += 1
        if self._notes <= 10 or self._notes % 1000 == 0:
            log.log(level, "%s (%d so far)", text, self._notes)

    # --- envelope -----------------------------------------------------------------------

    def envelope_doc(self, r: Record, force_base64: bool = False) -> dict[str, Any]:
        kind, ts = r.timestamp()
        data, data_encoding = self._text(r, r.value(), "value", force_base64)
        key, key_encoding = self._text(r, r.key(), "key", force_base64)
        headers = []
        for name, raw in r.headers() or []:
            value, encoding = self._text(r, raw, f"header {name!r}", force_base64)
            headers.append([name, value, encoding])
        return {
            "topic": r.topic(),
            "partition": r.partition(),
            "offset": r.offset(),
            "timestamp": ts if kind else None,
            "timestampType": TIMESTAMP_TYPES.get(kind),
            "key": key,
            "keyEncoding": key_encoding,
            "headers": headers,
            "data": data,
            "dataEncoding": data_encoding,
        }

    def _text(self, r: Record, raw: bytes | None, what: str, force_base64: bool) -> tuple[str | None, str | None]:
        if raw is None:
            return None, None
        if not force_base64 and self.data_encoding != "base64":
            try:
                return raw.decode("utf-8"), "utf8"
            except UnicodeDecodeError:
                if self.data_encoding == "utf8":
                    raise MarkerInMessage(
                        f"the {what} at {where(r)} is not UTF-8 but --data-encoding utf8 was asked for "
                        "(use auto or base64)",
                        raw[:80],
                    ) from None
        return base64.b64encode(raw).decode("ascii"), "base64"

    def _dump(self, doc: dict[str, Any], r: Record) -> bytes:
        raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=True).encode("ascii")
        if not self._clean(raw + self._eom, 1):
            raise MarkerInMessage(
                f"{where(r)}: even its JSON envelope holds a marker byte of this stage (a printable marker "
                "such as '|' or '{' clashes with JSON); choose control bytes as markers",
                raw[:80],
            )
        return raw
