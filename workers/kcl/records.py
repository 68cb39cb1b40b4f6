"""Input messages -> Kinesis records, with real or synthesised metadata.

An input message is a **Kinesis envelope** when it is a JSON object holding the keys
``sequenceNumber``, ``partitionKey`` and ``data`` (what the Kinesis extractor emits)::

    {"shardId": "shardId-000000000001", "sequenceNumber": "4959...", "subSequenceNumber": 0,
     "partitionKey": "user-7", "approximateArrivalTimestamp": 1700000000123,
     "data": "hello", "dataEncoding": "utf-8"}

``data`` is UTF-8 text, or base64 when ``dataEncoding`` (also ``encoding``,
``data_encoding``) is ``"base64"`` or ``dataBase64``/``base64`` is true.  Optional:
``shardId``, ``subSequenceNumber`` (default 0), ``approximateArrivalTimestamp`` (epoch
ms or s, or ISO-8601; default now), ``millisBehindLatest``.

A **shard-end marker** is a JSON object with ``"shardEnded": true`` and a ``shardId``
(``{"shardId": "shardId-000000000001", "shardEnded": true}``): every record of that
shard before it is processed, then the child gets ``shardEnded``.

Any other message is a **plain record**: its bytes are the record's data and the rest
is synthesised — ``sequenceNumber`` from a persistent per-stage, per-shard counter (20
digits, zero-padded so that string and number order agree), ``subSequenceNumber`` 0,
``partitionKey`` the MD5 hex digest of the data (Kinesis hashes partition keys with MD5
too), ``approximateArrivalTimestamp`` the time the batch arrived, shard = ``--shard-id``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from etlstage_workers.kcl.errors import InputError

ENVELOPE_KEYS = ("sequenceNumber", "partitionKey", "data")
SEQ_WIDTH = 20


@dataclass(slots=True)
class Record:
    """One record as the child will see it; ``data_b64`` is already base64 text.

    ``seq_int`` is ``sequence_number`` as a number (Kinesis numbers are decimal strings
    up to 128 bits): the extended sequence number ``key`` orders records."""

    data_b64: str
    partition_key: str
    sequence_number: str
    sub_sequence_number: int
    arrival_ms: int
    seq_int: int = 0

    @property
    def key(self) -> tuple[int, int]:
        return self.seq_int, self.sub_sequence_number

    def assign(self, n: int) -> None:
        """Give a plain record its synthetic sequence number."""
        self.seq_int = n
        self.sequence_number = str(n).zfill(SEQ_WIDTH)


@dataclass(slots=True)
class Parsed:
    """One input message, classified.  ``record.sequence_number`` is "" until assigned."""

    shard_id: str
    record: Record | None = None
    end: bool = False
    synthetic: bool = False
    millis_behind: int | None = None


def classify(message: bytes, default_shard: str, now_ms: int, where: str) -> Parsed:
    """Envelope, shard-end marker or plain record (see the module docstring)."""
    if message[:1] == b"{":
        try:
            doc = json.loads(message)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            if doc.get("shardEnded") is True and "data" not in doc:
                shard = doc.get("shardId")
                if not isinstance(shard, str) or not shard:
                    raise InputError(f"{where}: shard-end marker without a shardId: {message[:200]!r}")
                return Parsed(shard, end=True)
            if all(k in doc for k in ENVELOPE_KEYS):
                return _from_envelope(doc, default_shard, now_ms, where)
    data = base64.b64encode(message).decode("ascii")
    pk = hashlib.md5(message, usedforsecurity=False).hexdigest()
    return Parsed(default_shard, Record(data, pk, "", 0, now_ms), synthetic=True)


def _from_envelope(doc: dict, default_shard: str, now_ms: int, where: str) -> Parsed:
    seq = doc["sequenceNumber"]
    if isinstance(seq, int) and not isinstance(seq, bool):
        seq = str(seq)
    if not isinstance(seq, str) or not seq.isdigit():
        raise InputError(f"{where}: envelope sequenceNumber {seq!r}: expected a decimal string")
    sub = doc.get("subSequenceNumber", 0)
    if sub is None:
        sub = 0
    if not isinstance(sub, int) or isinstance(sub, bool) or sub < 0:
        raise InputError(f"{where}: envelope subSequenceNumber {sub!r}: expected an integer >= 0")
    pk = doc["partitionKey"]
    if not isinstance(pk, str):
        raise InputError(f"{where}: envelope partitionKey {pk!r}: expected a string")
    data = doc["data"]
    if not isinstance(data, str):
        raise InputError(f"{where}: envelope data of type {type(data).__name__}: expected a string")
    if _is_base64(doc):
        try:
            base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise InputError(f"{where}: envelope data {data[:60]!r} is marked base64 but is not valid base64") from None
        data_b64 = data
    else:
        try:
            raw = data.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InputError(f"{where}: envelope data {data[:60]!r} is not valid UTF-8 text ({exc.reason})") from None
        data_b64 = base64.b64encode(raw).decode("ascii")
    shard = doc.get("shardId") or default_shard
    if not isinstance(shard, str):
        raise InputError(f"{where}: envelope shardId {shard!r}: expected a string")
    arrival = _arrival_ms(doc.get("approximateArrivalTimestamp"), now_ms, where)
    behind = doc.get("millisBehindLatest")
    behind = behind if isinstance(behind, int) and not isinstance(behind, bool) else None
    return Parsed(shard, Record(data_b64, pk, seq, sub, arrival, int(seq)), millis_behind=behind)


def _is_base64(doc: dict) -> bool:
    for key in ("dataEncoding", "encoding", "data_encoding"):
        value = doc.get(key)
        if isinstance(value, str) and value.lower() in ("base64", "b64"):
            return True
    return doc.get("dataBase64") is True or doc.get("base64") is True


def _arrival_ms(value: object, now_ms: int, where: str) -> int:
    if value is None:
        return now_ms
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            value = int(text)
        else:
            try:
                stamp = datetime.fromisoformat(text)
            except ValueError:
                raise InputError(
                    f"{where}: envelope approximateArrivalTimestamp {value!r}: expected epoch ms or ISO-8601"
                ) from None
            if stamp.tzinfo is None:
                stamp = stamp.replace(tzinfo=UTC)
            return int(stamp.timestamp() * 1000)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # seconds (10 digits today) or milliseconds (13 digits)
        return int(value * 1000) if value < 1e11 else int(value)
    raise InputError(f"{where}: envelope approximateArrivalTimestamp {value!r}: expected epoch ms or ISO-8601")


def now_ms() -> int:
    return int(time.time() * 1000)
