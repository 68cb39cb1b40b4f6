"""Blocks of framed messages <-> Arrow binary columns, without a per-message Python loop.

A row of the engine's DataFrames holds one message *with* its EOM, so the rows of an
Arrow batch, laid end to end in the column's data buffer, are already a block for the
next worker: no copy to frame them, and results become rows by cutting the block at
its EOMs (found with numpy).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

COLUMN = "value"
SCHEMA = pa.schema([(COLUMN, pa.binary())])
ROWS_PER_BATCH = 10_000


def message_ends(block: bytes | memoryview, eom: int) -> np.ndarray:
    """End offset (exclusive) of every message of a block.

    >>> message_ends(b"a\\nbb\\n\\n", 10).tolist()
    [2, 5, 6]
    """
    return np.flatnonzero(np.frombuffer(block, np.uint8) == eom) + 1


def spans(ends: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of every message, from :func:`message_ends`."""
    return list(zip([0, *ends[:-1].tolist()], ends.tolist(), strict=True))


def to_block(column: pa.Array) -> bytes:
    """The messages of a binary column as one block (they already end with EOM)."""
    n = len(column)
    if n == 0:
        return b""
    buffers = column.buffers()
    width = np.int64 if pa.types.is_large_binary(column.type) else np.int32
    offsets = np.frombuffer(buffers[1], width)
    start, end = int(offsets[column.offset]), int(offsets[column.offset + n])
    return buffers[2][start:end].to_pybytes()


def to_batches(block: bytes, eom: int, rows: int = ROWS_PER_BATCH) -> list[pa.RecordBatch]:
    """A block as record batches of one binary column, one message (with EOM) per row."""
    if not block:
        return []
    ends = message_ends(block, eom).astype(np.int64)
    out = []
    for first in range(0, len(ends), rows):
        part = ends[first : first + rows]
        base = int(ends[first - 1]) if first else 0
        stop = int(part[-1])
        offsets = np.concatenate(([0], part - base)).astype(np.int32)
        data = pa.py_buffer(block[base:stop]) if (base, stop) != (0, len(block)) else pa.py_buffer(block)
        column = pa.Array.from_buffers(pa.binary(), len(part), [None, pa.py_buffer(offsets.tobytes()), data])
        out.append(pa.RecordBatch.from_arrays([column], schema=SCHEMA))
    return out


__all__ = ["COLUMN", "SCHEMA", "message_ends", "spans", "to_batches", "to_block"]
