"""KPL aggregated records: a tiny protobuf reader (and writer, for tests and the emulator).

An aggregated Kinesis record is ``F3 89 9A C2`` + protobuf ``AggregatedRecord`` + the
16-byte MD5 of the protobuf bytes::

    message AggregatedRecord {
      repeated string partition_key_table     = 1;
      repeated string explicit_hash_key_table = 2;
      repeated Record records                 = 3;
    }
    message Record {
      required uint64 partition_key_index     = 1;
      optional uint64 explicit_hash_key_index = 2;
      required bytes  data                    = 3;
      repeated Tag    tags                    = 4;   // skipped
    }

Like the KCL, anything that is not a well-formed aggregate (no magic, too short, MD5
mismatch, bad protobuf) is passed on as one ordinary record.

>>> blob = aggregate([("k1", b"a"), ("k2", b"bc")])
>>> deaggregate(blob, "outer")
[(0, 'k1', b'a'), (1, 'k2', b'bc')]
>>> deaggregate(b"plain", "pk")
[(0, 'pk', b'plain')]
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable

MAGIC = b"\xf3\x89\x9a\xc2"
_DIGEST = 16
_md5 = hashlib.md5

log = logging.getLogger("etlstage.kinesis.kpl")

SubRecord = tuple[int, str, bytes]  # (sub-sequence number, partition key, data)


class MalformedAggregate(ValueError):
    """The protobuf body of a record carrying the KPL magic could not be read."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    b = buf[pos]
    if b < 0x80:  # the common one-byte case, kept out of the loop
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        if pos >= len(buf) or shift > 63:
            raise MalformedAggregate(f"varint runs past the end at byte {pos}")
        b = buf[pos]
        result |= (b & 0x7F) << shift
        pos += 1
        if b < 0x80:
            return result, pos
        shift += 7


def _skip(buf: bytes, pos: int, wire: int) -> int:
    if wire == 0:
        return _varint(buf, pos)[1]
    if wire == 2:
        n, pos = _varint(buf, pos)
        return pos + n
    if wire == 1:
        return pos + 8
    if wire == 5:
        return pos + 4
    raise MalformedAggregate(f"unsupported protobuf wire type {wire} at byte {pos}")


def _parse_record(buf: bytes, pos: int, end: int) -> tuple[int, bytes]:
    pk_index = -1
    data = None
    while pos < end:
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if field == 1 and wire == 0:
            pk_index, pos = _varint(buf, pos)
        elif field == 3 and wire == 2:
            n, pos = _varint(buf, pos)
            data = buf[pos : pos + n]
            pos += n
        else:
            pos = _skip(buf, pos, wire)
    if pos != end or data is None or pk_index < 0:
        raise MalformedAggregate("a sub-record lacks its partition key index or data")
    return pk_index, data


def deaggregate(data: bytes, partition_key: str) -> list[SubRecord]:
    """The user records inside one Kinesis record, with their sub-sequence numbers."""
    if len(data) < 4 + _DIGEST or data[:4] != MAGIC:
        return [(0, partition_key, data)]
    body = data[4:-_DIGEST]
    if _md5(body).digest() != data[-_DIGEST:]:
        log.warning("record with the KPL magic bytes but a wrong MD5: passed on as one ordinary record")
        return [(0, partition_key, data)]
    try:
        return _unpack(body)
    except (MalformedAggregate, IndexError) as exc:
        log.warning("record with the KPL magic bytes and a good MD5 but unreadable protobuf (%s): "
                    "passed on as one ordinary record", exc)
        return [(0, partition_key, data)]


def _unpack(body: bytes) -> list[SubRecord]:
    keys: list[str] = []
    raw: list[tuple[int, bytes]] = []
    pos, end = 0, len(body)
    while pos < end:
        key, pos = _varint(body, pos)
        field, wire = key >> 3, key & 7
        if wire == 2:
            n, pos = _varint(body, pos)
            stop = pos + n
            if stop > end:
                raise MalformedAggregate(f"field {field} of {n} bytes runs past the end")
            if field == 1:
                keys.append(body[pos:stop].decode("utf-8"))
            elif field == 3:
                raw.append(_parse_record(body, pos, stop))
            pos = stop
        else:
            pos = _skip(body, pos, wire)
    out = []
    for sub, (index, payload) in enumerate(raw):
        if index >= len(keys):
            raise MalformedAggregate(f"sub-record {sub} names partition key #{index}, the table has {len(keys)}")
        out.append((sub, keys[index], payload))
    return out


# --- writer (tests, benchmarks, the emulator's seeding) -------------------------------


def _put_varint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _put_bytes(out: bytearray, field: int, payload: bytes) -> None:
    _put_varint(out, field << 3 | 2)
    _put_varint(out, len(payload))
    out += payload


def aggregate(records: Iterable[tuple[str, bytes]]) -> bytes:
    """One KPL aggregated record holding ``(partition key, data)`` pairs, in order."""
    keys: dict[str, int] = {}
    body = bytearray()
    subs = bytearray()
    for key, data in records:
        index = keys.setdefault(key, len(keys))
        rec = bytearray()
        _put_varint(rec, 1 << 3 | 0)
        _put_varint(rec, index)
        _put_bytes(rec, 3, data)
        _put_bytes(subs, 3, bytes(rec))
    for key in keys:
        _put_bytes(body, 1, key.encode("utf-8"))
    body += subs
    return MAGIC + bytes(body) + _md5(bytes(body)).digest()
