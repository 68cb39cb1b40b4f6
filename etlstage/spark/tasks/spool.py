"""A driver-side extractor's windows on disk: cut into the batch's partitions, synced before use."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from etlstage.errors import PipelineError
from etlstage.spark.checkpoint import owner_only, private_folder
from etlstage.spark.tasks.blocks import part_cuts
from etlstage.state.durable import fsync_path


def write_window(folder: Path, name: str, block: bytes, eom: int, parts: int) -> None:
    """``block``'s messages in ``parts`` files ``<name>-<p>.bin`` of about equal counts, fsync'd."""
    private_folder(folder)
    # counted and cut slice by slice: no array of every message's end over a window of
    # hundreds of MB, and each part written from the window itself (no copy)
    cuts = part_cuts(block, eom, parts)
    view = memoryview(block)
    for p in range(parts):
        path = folder / f"{name}-{p}.bin"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb", opener=owner_only) as f:
            f.write(view[cuts[p] : max(cuts[p], cuts[p + 1])])
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    fsync_path(folder, directory=True)


def spool_blocks(pieces: Iterable[bytes], eom: int, name: str) -> Iterator[bytes]:
    """A spooled window's messages in blocks, each ending with EOM, from the file's pieces as
    the driver line serves them (a task holds one piece, not the window)."""
    carry = b""
    marker = bytes([eom])
    for piece in pieces:
        cut = piece.rfind(marker) + 1
        if not cut:
            carry += piece
            continue
        if carry:
            yield b"".join((carry, memoryview(piece)[:cut]))  # one copy
        else:
            yield piece if cut == len(piece) else piece[:cut]
        carry = piece[cut:]
    if carry:  # written by write_window: every message ends with EOM
        raise PipelineError(f"spooled window {name} ends in the middle of a message ({len(carry)} bytes)")


__all__ = ["spool_blocks", "write_window"]
