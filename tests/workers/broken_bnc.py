#!/usr/bin/env python3
"""DELIBERATELY BROKEN T-worker (for conformance-checker tests): in worker-driven batch
mode it writes BNC after EVERY message, including the one that fills the batch, and only
then the results and EOP.  Everything else is right: the markers come from the ETLSTAGE_*
environment, results are uppercased, EOB closes a partial batch, exit 0 on stdin EOF.

Correct, batch size 2:  a\\n -> \\x11   b\\n -> A\\nB\\n\\x00
This worker:            a\\n -> \\x11   b\\n -> \\x11A\\nB\\n\\x00
"""

import os
import sys


def marker(name: str, default: int) -> bytes:
    return bytes([int(os.environ.get(f"ETLSTAGE_{name}") or f"{default:02x}", 16)])


EOM, EOP, EOB, BNC = marker("EOM", 0x0A), marker("EOP", 0x00), marker("EOB", 0x17), marker("BNC", 0x11)
SIZE = int(os.environ.get("ETLSTAGE_BATCH_SIZE") or 1)
out = sys.stdout.buffer
batch: list[bytes] = []
tail = b""


def reply() -> None:
    out.write(b"".join(m.upper() + EOM for m in batch) + EOP)
    batch.clear()


while chunk := os.read(0, 65536):
    data = tail + chunk
    pos = 0
    while True:
        m, b = data.find(EOM, pos), data.find(EOB, pos)
        if m < 0 and b < 0:
            break
        if b >= 0 and (m < 0 or b < m):
            reply()
            pos = b + 1
            continue
        batch.append(data[pos:m])
        pos = m + 1
        out.write(BNC)  # THE BUG: also after the message that fills the batch
        if len(batch) >= SIZE:
            reply()
    tail = data[pos:]
    out.flush()
