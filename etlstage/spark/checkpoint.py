"""Spark's checkpoint as a crash leaves it, or as a damaged disk or a hand leaves it.

Spark writes each offset and commit log entry to a temporary file and renames it into
place. A driver killed between the two leaves the temporary file behind, and when that
happens on batch 0 Spark refuses the checkpoint for good ("should be empty on batch 0").
Nothing in such a file was ever acknowledged, so the engine removes them before a query
starts (no other query may use the checkpoint at that moment: Spark forbids it anyway).

>>> bool(ABANDONED.match(".0.3c39a824-8032-47d8-aef9-cec641e10f2f.tmp")), bool(ABANDONED.match("0"))
(True, False)

A damaged checkpoint (an ``offsets/N`` cut short, garbage in a ``commits/N``, a file that
no longer matches its ``.N.crc``, ``metadata`` deleted) is found before the query starts
and named with what to do (:func:`check_checkpoint`), instead of Spark failing on it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import struct
import zlib
from pathlib import Path

from etlstage.config.model import PipelineConfig
from etlstage.errors import StateError

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


LOG_VERSION = re.compile(r"^v[0-9]+$")


def check_checkpoint(checkpoint: str | Path) -> None:
    """Raise :class:`StateError` (exit 2) naming the first damaged file of Spark's checkpoint
    under ``checkpoint`` and what to do; nothing to check before the first batch."""
    root = Path(checkpoint)
    entries = {name: _numbered(root / name) for name in LOGS}
    if not any(entries.values()):
        return
    metadata = root / "metadata"
    if not metadata.is_file():
        raise _damaged(root, metadata, "is missing, though offsets/ and commits/ hold the batches run", None)
    problem = _checksum_problem(metadata) or _metadata_problem(metadata.read_bytes())
    if problem:
        raise _damaged(root, metadata, problem, None)
    for name, numbers in entries.items():
        for n in numbers:
            path = root / name / str(n)
            problem = _checksum_problem(path) or _entry_problem(path.read_bytes(), name)
            if problem:
                last = n == numbers[-1] and (name == "commits" or n not in entries["commits"])
                raise _damaged(root, path, problem, name if last else None)


def committed_offsets(checkpoint: str | Path) -> list[str] | None:
    """The source offsets of the query's last batch, one line per source as Spark logged them
    (JSON, or "-" for a source with none), when that batch's commit is logged too; None when
    no batch has run, the last one is planned but not committed, or an entry is damaged
    (:func:`check_checkpoint` names it when the query starts).

    A query that starts here plans its next batch from these offsets, as a source's
    ``latestOffset(start)`` gets them: what :mod:`etlstage.spark.driver.idle` asks a native
    source about before starting Spark for a ``--once`` run.
    """
    root = Path(checkpoint)
    offsets, commits = _numbered(root / "offsets"), _numbered(root / "commits")
    if not offsets or not commits or commits[-1] != offsets[-1]:
        return None
    last = offsets[-1]
    try:
        for name in LOGS:
            path = root / name / str(last)
            if _checksum_problem(path) or _entry_problem(path.read_bytes(), name):
                return None
        return (root / "offsets" / str(last)).read_bytes().decode().split("\n")[2:]
    except (OSError, UnicodeDecodeError):  # unreadable: the query's own start says why
        return None


def _numbered(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []


def _checksum_problem(path: Path) -> str | None:
    """Hadoop's ``.<name>.crc`` beside ``path``: "crc\\0", the chunk size, a CRC-32 per chunk."""
    crc = path.with_name(f".{path.name}.crc")
    if not crc.is_file():
        return None
    data, sums = path.read_bytes(), crc.read_bytes()
    if len(sums) < 8 or sums[:4] != b"crc\0":
        return f"its checksum file {crc.name} is damaged"
    chunk = struct.unpack(">i", sums[4:8])[0]
    if chunk <= 0:
        return f"its checksum file {crc.name} is damaged"
    expected = [zlib.crc32(data[i : i + chunk]) for i in range(0, len(data), chunk)]
    if sums[8:] != b"".join(struct.pack(">I", c) for c in expected):
        return f"it does not match its checksum file {crc.name} ({len(data)} bytes: cut short or changed)"
    return None


def _metadata_problem(raw: bytes) -> str | None:
    try:
        doc = json.loads(raw.decode().splitlines()[0])
    except (UnicodeDecodeError, IndexError, ValueError):
        return "is not the query's JSON metadata"
    return None if isinstance(doc, dict) and "id" in doc else "holds no query id"


def _entry_problem(raw: bytes, log_name: str) -> str | None:
    """Why ``raw`` is not an entry of Spark's offsets or commits log ("v1", a JSON object,
    then for offsets one line per source: JSON or "-")."""
    try:
        lines = raw.decode().split("\n")
    except UnicodeDecodeError:
        return "is not text"
    if not LOG_VERSION.match(lines[0]):
        return f"does not start with a log version (v1), but {lines[0][:20]!r}"
    try:
        if len(lines) < 2 or not isinstance(json.loads(lines[1]), dict):
            return "is cut short: no batch metadata after its version"
        for line in lines[2:] if log_name == "offsets" else ():
            if line != "-":
                json.loads(line)
    except ValueError:
        return "is cut short or holds a line that is not JSON"
    return None


def _damaged(root: Path, path: Path, problem: str, last_of: str | None) -> StateError:
    crc = path.with_name(f".{path.name}.crc")
    remove = f"rm {path} {crc}" if crc.exists() else f"rm {path}"
    if last_of == "offsets":
        todo = (
            f"It is the plan of the last batch, never committed: remove it ({remove}) and Spark plans that batch again"
        )
    elif last_of == "commits":
        todo = f"It is the last batch's commit: remove it ({remove}) and that batch runs again (loaded again)"
    else:
        todo = (
            f"Move the checkpoint aside (mv {root} {root}.damaged) and put back a copy from a backup; "
            "without one, the next run starts afresh: extractors start again from their beginning"
        )
    return StateError(f"the Spark checkpoint is damaged: {path} {problem}. {todo}")


def is_local(checkpoint: str) -> bool:
    """Whether ``engine.checkpoint`` is a local path (else a Hadoop URI: ``s3a://``, ``hdfs://``...).

    >>> is_local("/var/lib/cp"), is_local("s3a://lake/cp"), is_local("file:///tmp/cp")
    (True, False, False)
    """
    return "://" not in checkpoint


def engine_dir(config: PipelineConfig) -> Path:
    """The driver's folder for the engine's own files (spooled windows, counts, tallies):
    ``etlstage/`` inside a local checkpoint, else one per checkpoint URI under ``state_dir``.
    Only processes on the driver's host use it; tasks reach it through the driver line
    (:mod:`etlstage.spark.driver_line`)."""
    checkpoint = config.engine.checkpoint
    if is_local(checkpoint):
        return Path(checkpoint) / "etlstage"
    return Path(config.state_dir) / "spark" / hashlib.sha256(checkpoint.encode()).hexdigest()[:16]


def own_path(config: PipelineConfig, kind: str, *names: str) -> Path:
    """Where the engine keeps its own files of ``kind`` (spool, counts, workers, native,
    ship, batch-counts): in :func:`engine_dir`, on the driver — the one place that says so.

    >>> from etlstage.config.model import EngineConfig, PipelineConfig
    >>> local = PipelineConfig([], "/st", None, engine=EngineConfig(checkpoint="/ck"))  # type: ignore[arg-type]
    >>> own_path(local, "spool", "t").as_posix()
    '/ck/etlstage/spool/t'
    >>> remote = PipelineConfig([], "/st", None, engine=EngineConfig(checkpoint="s3a://b/ck"))  # type: ignore[arg-type]
    >>> own_path(remote, "spool", "t").as_posix()
    '/st/spark/a710d324f583454c/spool/t'
    """
    return engine_dir(config).joinpath(kind, *names)


def private_folder(path: Path) -> Path:
    """``path`` with every missing level created 0700: what the engine writes beside Spark's
    logs (spooled windows, counts, tallies) holds message data or its traces."""
    missing = []
    level = path
    while not level.exists() and level != level.parent:
        missing.append(level)
        level = level.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:  # another task made it meanwhile
            pass
    return path


def owner_only(path: str, flags: int) -> int:
    """An ``opener`` for :func:`open`: a file it creates is 0600."""
    return os.open(path, flags, 0o600)


__all__ = [
    "check_checkpoint",
    "committed_offsets",
    "engine_dir",
    "is_local",
    "own_path",
    "owner_only",
    "private_folder",
    "remove_abandoned",
]
