"""The MultiLangDaemon's JSON lines, protocol V1 and V2 (one JSON object per line).

===================  =========================================================  ==========================
action               V2 (KCL 2.x/3.x, amazon_kclpy >= 2)                         V1 (KCL 1.x, erlmld V1)
===================  =========================================================  ==========================
initialize           ``shardId``, ``sequenceNumber``, ``subSequenceNumber``      ``shardId``
processRecords       ``millisBehindLatest``, records with ``action: record``,   records: ``data``,
                     ``data``, ``partitionKey``, ``sequenceNumber``,             ``partitionKey``,
                     ``subSequenceNumber``, ``approximateArrivalTimestamp``      ``sequenceNumber``
checkpoint (answer)  ``sequenceNumber``, ``subSequenceNumber``, ``error``        ``checkpoint``,
                                                                                 ``sequenceNumber``, ``error``
shardEnded           ``shardEnded``                                              ``shutdown`` TERMINATE
shutdownRequested    ``shutdownRequested``                                       ``shutdownRequested``
lease end            ``leaseLost``                                               ``shutdown`` ZOMBIE
===================  =========================================================  ==========================

>>> initialize(2, "shardId-000000000000", "TRIM_HORIZON", 0)
b'{"action":"initialize","shardId":"shardId-000000000000","sequenceNumber":"TRIM_HORIZON","subSequenceNumber":0}\\n'
>>> initialize(1, "shardId-000000000000", None, None)
b'{"action":"initialize","shardId":"shardId-000000000000"}\\n'
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from etlstage_workers.kcl.records import Record

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode


def line(doc: dict) -> bytes:
    return _dumps(doc).encode("ascii") + b"\n"


def _json_string(text: str) -> str:
    """A JSON string literal; the common keys (hex digests, ids) need no escaping."""
    if text.isascii() and text.isalnum():
        return f'"{text}"'
    return json.dumps(text)


def initialize(version: int, shard_id: str, seq: str | None, sub: int | None) -> bytes:
    doc: dict = {"action": "initialize", "shardId": shard_id}
    if version >= 2:
        doc["sequenceNumber"] = seq
        doc["subSequenceNumber"] = sub
    return line(doc)


def process_records(version: int, records: Sequence[Record], millis_behind: int) -> bytes:
    # Built as text: one json.dumps per string field would cost more than the records' joins.
    dumps = _json_string
    if version >= 2:
        parts = [
            f'{{"action":"record","data":"{r.data_b64}","partitionKey":{dumps(r.partition_key)},'
            f'"sequenceNumber":"{r.sequence_number}","subSequenceNumber":{r.sub_sequence_number:d},'
            f'"approximateArrivalTimestamp":{r.arrival_ms:d}}}'
            for r in records
        ]
        head = f'{{"action":"processRecords","millisBehindLatest":{millis_behind:d},"records":['
    else:
        parts = [
            f'{{"data":"{r.data_b64}","partitionKey":{dumps(r.partition_key)},"sequenceNumber":"{r.sequence_number}"}}'
            for r in records
        ]
        head = '{"action":"processRecords","records":['
    return (head + ",".join(parts) + "]}\n").encode("ascii")


def checkpoint_answer(version: int, seq: object, sub: object, error: str | None) -> bytes:
    """The answer to a child's checkpoint request: the numbers it asked for, and ``error``."""
    if version >= 2:
        return line({"action": "checkpoint", "sequenceNumber": seq, "subSequenceNumber": sub, "error": error})
    return line({"action": "checkpoint", "checkpoint": seq, "sequenceNumber": seq, "error": error})


def shard_ended(version: int, legacy_shutdown: bool = False) -> tuple[bytes, str]:
    """(line, expected responseFor).  ``legacy_shutdown``: V2 records but KCL 1.x endings
    (``shutdown`` with a reason), as erlmld's V2 speaks."""
    if version >= 2 and not legacy_shutdown:
        return line({"action": "shardEnded"}), "shardEnded"
    return line({"action": "shutdown", "reason": "TERMINATE"}), "shutdown"


def shutdown_requested() -> tuple[bytes, str]:
    return line({"action": "shutdownRequested"}), "shutdownRequested"


def lease_lost(version: int, legacy_shutdown: bool = False) -> tuple[bytes, str]:
    if version >= 2 and not legacy_shutdown:
        return line({"action": "leaseLost"}), "leaseLost"
    return line({"action": "shutdown", "reason": "ZOMBIE"}), "shutdown"
