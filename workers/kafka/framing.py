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
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from etlstage_workers.markersafe import MarkerGuard

from etlstage.errors import MarkerInMessage
from etlstage.protocol.framing import checked
from etlstage.protocol.markers import Markers

log = logging.getLogger("etlstage.kafka")

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
        self.guard = MarkerGuard(markers, on_marker, "KAFKA_MARKER_IN_DATA", log)

    @property
    def escaped(self) -> int:
        """Records re-serialised or enveloped because of a marker byte."""
        return self.guard.escaped

    def frame(self, records: Sequence[Record]) -> list[bytes]:
        """One message per record, in order. Values without a marker byte (the rule) come
        as :class:`Checked`: one protocol block, encoded and scanned once, that the SDK
        writes as it is."""
        if self.envelope:
            return [self.guard.dump(self.envelope_doc(r), where(r)) for r in records]
        out = [r.value() or b"" for r in records]
        try:
            return checked(out, self.markers, "the Kafka extractor's output")
        except MarkerInMessage:  # some value holds a marker: each is made safe on its own
            return [self._safe(r, v) for r, v in zip(records, out, strict=True)]

    def _safe(self, r: Record, data: bytes) -> bytes:
        return self.guard.safe(data, where(r), lambda: self.envelope_doc(r, force_base64=True))

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
