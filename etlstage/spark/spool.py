"""A driver-side extractor's windows on disk: cut into the batch's partitions, synced before use."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from etlstage.errors import PipelineError
from etlstage.spark.blocks import message_ends
from etlstage.spark.checkpoint import owner_only, private_folder
from etlstage.state.durable import fsync_path


def write_window(folder: Path, name: str, block: bytes, eom: int, parts: int) -> None:
    """``block``'s messages in ``parts`` files ``<name>-<p>.bin`` of about equal counts, fsync'd."""
    private_folder(folder)
    ends = message_ends(block, eom)
    cuts = [0] + [int(ends[(len(ends) * k) // parts - 1]) if (len(ends) * k) // parts else 0 for k in range(1, parts)]
    cuts.append(len(block))
    for p in range(parts):
        path = folder / f"{name}-{p}.bin"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb", opener=owner_only) as f:
            f.write(block[cuts[p] : max(cuts[p], cuts[p + 1])])
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    fsync_path(folder, directory=True)


SPOOL_READ = 8 << 20  # a spooled window is read in pieces of about this size


def spool_blocks(name: str, eom: int, size: int = SPOOL_READ) -> Iterator[bytes]:
    """A spooled window's messages in blocks of about ``size`` bytes, each ending with EOM
    (a task holds one piece, not the window), or a clear error when the file is missing."""
    try:
        f = open(name, "rb")  # noqa: SIM115  (closed below; a generator keeps it open between pieces)
    except FileNotFoundError:
        raise PipelineError(
            f"spooled window {name} is missing: the checkpoint directory must be a path every "
            "executor sees (engine.checkpoint), and must not be cleaned while the query runs"
        ) from None
    with f:
        carry = b""
        while piece := f.read(size):
            block = carry + piece
            cut = block.rfind(bytes([eom])) + 1
            if cut:
                yield block[:cut]
            carry = block[cut:]
        if carry:  # written by write_window: every message ends with EOM
            raise PipelineError(f"spooled window {name} ends in the middle of a message ({len(carry)} bytes)")


__all__ = ["spool_blocks", "write_window"]
