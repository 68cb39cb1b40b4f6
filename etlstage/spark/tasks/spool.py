"""A driver-side extractor's windows on disk: cut into the batch's partitions, synced before use."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from etlstage.errors import PipelineError
from etlstage.spark.checkpoint import owner_only, private_folder
from etlstage.spark.tasks.blocks import part_cuts
from etlstage.state.durable import fsync_path


def write_window(folder: Path, name: str, pieces: Sequence[bytes], eom: int, parts: int) -> None:
    """The messages of ``pieces`` (laid end to end) in ``parts`` files ``<name>-<p>.bin`` of
    about equal counts, fsync'd."""
    private_folder(folder)
    # counted and cut slice by slice, each part written from the pieces themselves: a
    # window of hundreds of MB is neither joined nor copied, nor every message's end listed
    cuts = part_cuts(pieces, eom, parts)
    for p in range(parts):
        path = folder / f"{name}-{p}.bin"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb", opener=owner_only) as f:
            f.writelines(_between(pieces, cuts[p], cuts[p + 1]))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    fsync_path(folder, directory=True)


def _between(pieces: Sequence[bytes], start: tuple[int, int], end: tuple[int, int]) -> Iterator[memoryview]:
    """The bytes of ``pieces`` from ``start`` to ``end`` (each a (piece, offset)), uncopied."""
    (first, offset), (last, stop) = start, end
    for j in range(first, last + 1):
        lo = offset if j == first else 0
        hi = stop if j == last else len(pieces[j])
        if hi > lo:
            yield memoryview(pieces[j])[lo:hi]


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
