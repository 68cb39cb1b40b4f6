"""Spark's checkpoint as a crash leaves it.

Spark writes each offset and commit log entry to a temporary file and renames it into
place. A driver killed between the two leaves the temporary file behind, and when that
happens on batch 0 Spark refuses the checkpoint for good ("should be empty on batch 0").
Nothing in such a file was ever acknowledged, so the engine removes them before a query
starts (no other query may use the checkpoint at that moment: Spark forbids it anyway).

>>> bool(ABANDONED.match(".0.3c39a824-8032-47d8-aef9-cec641e10f2f.tmp")), bool(ABANDONED.match("0"))
(True, False)
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

log = logging.getLogger("etlstage.spark")

ABANDONED = re.compile(r"^\.\.?\d+\.[0-9a-f-]{36}\.tmp(\.crc)?$")
LOGS = ("offsets", "commits")


def remove_abandoned(checkpoint: str | Path) -> list[str]:
    """Remove Spark's half-written log entries under ``checkpoint``; their names."""
    removed = []
    for name in LOGS:
        folder = Path(checkpoint) / name
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            if ABANDONED.match(entry.name) and entry.is_file():
                entry.unlink()
                removed.append(f"{name}/{entry.name}")
    if removed:
        log.info("removed what a crash left half-written in the Spark checkpoint: %s", ", ".join(sorted(removed)))
    return removed


__all__ = ["remove_abandoned"]
