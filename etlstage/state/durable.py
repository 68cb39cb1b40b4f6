"""Files that survive a crash: written in full or not at all, and on disk before we go on.

>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> write_durably(folder / "offset", b"42")
>>> (folder / "offset").read_bytes()
b'42'
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: str | Path, *, directory: bool = False) -> None:
    """Flush a file, or a directory's entries (after a rename or a new file in it), to disk."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(path: str | Path, data: bytes) -> None:
    """``data`` as ``path``: written beside it, synced, renamed over it, the rename synced."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # the old file stays whole; nothing half-written is left beside it
        raise
    fsync_path(path.parent, directory=True)


__all__ = ["fsync_path", "write_durably"]
