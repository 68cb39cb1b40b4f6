"""Where a pipeline's state lives: one folder per pipeline under ``state_dir``, named after it.

Two pipeline files in one folder share the default ``state_dir`` (``.etlstage`` beside
them); each pipeline keeps its state — ``state.db``, ``stages/``, the Spark checkpoint,
the run lock — in ``<state_dir>/<folder>``, the folder named after the pipeline's
``name``.  A name that is not a plain file name is made one, with a digest of the name
so two names never share a folder:

>>> folder_name("orders"), folder_name("orders v2")
('orders', 'orders_v2-cd5c1153')
>>> folder_name(".."), folder_name("a/b")
('..-5ec1f7e7', 'a_b-c14cddc0')

State written before pipelines had folders of their own (``state.db`` right in
``state_dir``) is moved into the first pipeline's folder that uses it, once, with a
log line (:func:`migrate_flat`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path

from etlstage.errors import StateError

log = logging.getLogger("etlstage.state")

_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
# what the flat layout kept right in state_dir (besides the SQLite side files)
FLAT_ENTRIES = ("state.db", "state.db-wal", "state.db-shm", "state.db-journal", "stages", "spark-checkpoint")


def folder_name(name: str) -> str:
    """The folder under ``state_dir`` that holds pipeline ``name``'s state."""
    if _PLAIN.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9._-]', '_', name)[:80]}-{digest}"  # never "." or "..": it ends in the digest


def pipeline_dir(root: str | Path, name: str) -> Path:
    return Path(root) / folder_name(name)


def migrate_flat(pipeline: str | Path) -> bool:
    """Move the flat layout's state (``state.db`` in the parent of ``pipeline``) into ``pipeline``.

    Done under a lock on the parent folder, so two pipelines starting at once do not
    both take it; the first pipeline to run after an upgrade gets the old state (it was
    every pipeline's of that folder). Entries that are links or not the user's are
    refused before anything moves (the state store's checks). True when it moved.
    """
    from etlstage.state.store import _entry_problem, _locked

    target = Path(pipeline)
    root = target.parent
    if not os.path.lexists(root / "state.db"):  # (when it is there, ``root`` is a directory)
        return False
    with _locked(root):
        if not os.path.lexists(root / "state.db") or os.path.lexists(target / "state.db"):
            return False
        present = [e for e in FLAT_ENTRIES if os.path.lexists(root / e)]
        for entry in present:
            kind = "directory" if entry in ("stages", "spark-checkpoint") else "file"
            problem = _entry_problem(root / entry, os.lstat(root / entry), kind)
            if problem:
                raise StateError(problem)
        # through a temporary folder: the pipeline's folder may bear the name of one of the entries ("stages")
        staging = root / f".{target.name}.moving-{os.getpid()}"
        try:
            os.mkdir(staging, 0o700)
            for entry in present:
                os.rename(root / entry, staging / entry)
            if os.path.lexists(target):  # the folder without a store (a run lock taken): fill it
                for entry in present:
                    os.rename(staging / entry, target / entry)
                os.rmdir(staging)
            else:
                os.rename(staging, target)
        except OSError as exc:
            raise StateError(f"cannot move the state in {root} into {target}: {exc.strerror}") from None
    log.warning(
        "moved the state kept in %s (%s) into %s: each pipeline now keeps its state in a folder of its own",
        root,
        ", ".join(present),
        target,
    )
    return True


__all__ = ["FLAT_ENTRIES", "folder_name", "migrate_flat", "pipeline_dir"]
