"""Which instance a message goes to under ``partition_by``: the rule both engines follow,
so that a key meets its state (a stage's per-instance directory) whichever engine runs.

The key is the value at the stage's JSON pointer, as canonical JSON (``null`` when
absent); a message that is not JSON is its own key.  The instance is the key's CRC-32
modulo the number of instances — stable across runs, versions and machines.

>>> tokens = parse_pointer("/h/seq")
>>> partition_key(b'{"h": {"seq": "a"}}', tokens), partition_of(b'"a"', 3)
(b'"a"', 1)
"""

from __future__ import annotations

import json
import zlib

from etlstage.protocol.pointer import MISSING, parse_pointer, resolve


def partition_key(message: bytes, tokens: tuple[str, ...]) -> bytes:
    try:
        doc: object = json.loads(message)
    except ValueError:
        return message
    value = resolve(doc, tokens)
    return json.dumps(None if value is MISSING else value, sort_keys=True).encode()


def partition_of(key: bytes, instances: int) -> int:
    return zlib.crc32(key) % instances


__all__ = ["parse_pointer", "partition_key", "partition_of"]
