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


def _checked(data: bytes) -> tuple[list[str], list[int], list[bytes]] | None:
    """Key table, key index and data per sub-record — or None: not a (good) aggregate."""
    n = len(data)
    if n < 4 + _DIGEST or data[:4] != MAGIC:
        return None
    if _md5(memoryview(data)[4 : n - _DIGEST]).digest() != data[n - _DIGEST :]:
        log.warning("record with the KPL magic bytes but a wrong MD5: passed on as one ordinary record")
        return None
    try:
        keys, index, datas = _unpack(data, 4, n - _DIGEST)
        if index and max(index) >= len(keys):
            raise MalformedAggregate(f"a sub-record names a partition key beyond the table of {len(keys)}")
    except (MalformedAggregate, IndexError, UnicodeDecodeError) as exc:
        log.warning(
            "record with the KPL magic bytes and a good MD5 but unreadable protobuf (%s): "
            "passed on as one ordinary record",
            exc,
        )
        return None
    return keys, index, datas


def deaggregate(data: bytes, partition_key: str) -> list[SubRecord]:
    """The user records inside one Kinesis record, with their sub-sequence numbers."""
    found = _checked(data)
    if found is None:
        return [(0, partition_key, data)]
    keys, index, datas = found
    return [(sub, keys[i], d) for sub, (i, d) in enumerate(zip(index, datas, strict=True))]


def payloads(data: bytes) -> list[bytes]:
    """Just the data of each user record (the hot path when only data is emitted)."""
    found = _checked(data)
    return [data] if found is None else found[2]


def _unpack(buf: bytes, pos: int, end: int) -> tuple[list[str], list[int], list[bytes]]:
    keys: list[str] = []
    index: list[int] = []
    datas: list[bytes] = []
    add_index, add_data = index.append, datas.append
    while pos < end:
        if buf[pos] == 0x1A:  # field 3 (a sub-record), length-delimited: the hot path
            b = buf[pos + 1]
            if b < 0x80:
                n, pos = b, pos + 2
            elif buf[pos + 2] < 0x80:  # records of 128 B .. 16 KB
                n, pos = (b & 0x7F) | (buf[pos + 2] << 7), pos + 3
            else:
                n, pos = _varint(buf, pos + 1)
            stop = pos + n
            if stop > end:
                raise MalformedAggregate(f"a sub-record of {n} bytes runs past the end")
            # the usual layout: 08 <key index, one byte> 1A <length: one or two bytes> <data>
            if buf[pos] == 0x08 and buf[pos + 1] < 0x80 and buf[pos + 2] == 0x1A:
                b = buf[pos + 3]
                if b < 0x80:
                    m, at = b, pos + 4
                elif buf[pos + 4] < 0x80:
                    m, at = (b & 0x7F) | (buf[pos + 4] << 7), pos + 5
                else:
                    m, at = _varint(buf, pos + 3)
                if at + m == stop:
                    add_index(buf[pos + 1])
                    add_data(buf[at:stop])
                    pos = stop
                    continue
            i, d = _parse_record(buf, pos, stop)
            add_index(i)
            add_data(d)
            pos = stop
            continue
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 2:
            n, pos = _varint(buf, pos)
            stop = pos + n
            if stop > end:
                raise MalformedAggregate(f"field {field} of {n} bytes runs past the end")
            if field == 1:
                keys.append(buf[pos:stop].decode("utf-8"))
            pos = stop
        else:
            pos = _skip(buf, pos, wire)
    if pos != end:
        raise MalformedAggregate(f"the protobuf body ends at byte {pos}, expected {end}")
    return keys, index, datas


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
