"""Whole batches for Spark's readers: a table's ``_spark_metadata`` log, as Spark's own file sink keeps.

Publishing a batch is a rename per file, so for a moment a table holds part of it. A
directory with a ``_spark_metadata`` folder is read by Spark (``spark.read.parquet(table)``,
any format) through that log only: the files it lists, nothing else. So a batch is
published in two steps — its files renamed into the table, then **one log file** naming
them all — and a Spark reader sees the batch whole or not at all. Readers that ignore the
log (pyarrow) still see whole files only.

The log is Spark's format (``FileStreamSinkLog``, version 1): files ``0``, ``1``, … each
``v1`` then one JSON line per data file (``path``, ``size``, ``isDir``,
``modificationTime``, ``blockReplication``, ``blockSize``, ``action: "add"``); every
tenth (ids 9, 19, …) is a compaction, ``<id>.compact``, listing every file so far, as
Spark's readers expect with the default compact interval. A log file is created with a
hard link (never replaced); writers take an ``flock`` on ``<table>/_spark_metadata.lock``
(the supervisor loader's instances, both engines). The first log of a table that already
holds files lists them too (tables published before the log existed stay readable),
except the files of batches still being published (their staging is there): those come
with their own batch.

A publish cut short is finished by running it again: :func:`append` first looks for the
batch's files among the logs written since its first attempt (``since``), so a batch is
never listed twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from urllib.parse import quote

from etlstage.worker.durable import fsync_path

METADATA = "_spark_metadata"
COMPACT_INTERVAL = 10  # Spark's default (spark.sql.streaming.fileSink.log.compactInterval)
VERSION = "v1"


def latest_id(table: str) -> int:
    """The newest log id of ``table``; -1 when it has none."""
    ids = [_id_of(name) for name in _names(table)]
    return max((i for i in ids if i is not None), default=-1)


def append(table: str, files: list[str], batch: str, since: int, in_progress: set[str]) -> int | None:
    """Log ``files`` (absolute paths inside ``table``) as one batch; return its log id, or
    None when an earlier attempt logged them (a log after ``since`` names them already).

    ``in_progress``: the names of batches still being published (left out of a first log)."""
    folder = os.path.join(table, METADATA)
    with _locked(table):
        first = not os.path.isdir(folder)
        os.makedirs(folder, exist_ok=True)
        latest = latest_id(table)
        marker = f"/part-{batch}-"
        for log_id in range(since + 1, latest + 1):
            if any(marker in line for line in _lines(folder, log_id)):  # its paths, as written
                return None
        entries = [_entry(path) for path in files]
        if first:  # files published before the log existed stay visible
            mine = set(files)
            entries += [_entry(p) for p in _existing(table, in_progress) if p not in mine]
        lines = [json.dumps(e, separators=(",", ":")) for e in entries]
        new_id = latest + 1
        if _is_compaction(new_id):
            lines = _all_lines(folder, latest) + lines
            name = f"{new_id}.compact"
        else:
            name = str(new_id)
        _create(folder, name, lines)
        return new_id


def _all_lines(folder: str, latest: int) -> list[str]:
    """Every entry logged up to ``latest`` (the last compaction and the logs after it), as
    written: a compaction copies them without parsing them."""
    start = latest - (latest + 1) % COMPACT_INTERVAL if latest >= 0 else 0
    out: list[str] = []
    for log_id in range(max(0, start), latest + 1):
        out += _lines(folder, log_id)
    return out


def _lines(folder: str, log_id: int) -> list[str]:
    name = f"{log_id}.compact" if _is_compaction(log_id) else str(log_id)
    try:
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    if not lines or lines[0] != VERSION:
        raise ValueError(f"{os.path.join(folder, name)}: not a version-1 Spark sink log")
    return [line for line in lines[1:] if line]


def _entry(path: str) -> dict[str, object]:
    st = os.stat(path)
    return {
        "path": "file://" + quote(path, safe="/=:@,+$-_.!~*'()"),  # the file's URI, as Spark writes it
        "size": st.st_size,
        "isDir": False,
        "modificationTime": int(st.st_mtime * 1000),
        "blockReplication": 1,
        "blockSize": 33554432,
        "action": "add",
    }


def _create(folder: str, name: str, lines: list[str]) -> None:
    """``folder/name`` with the JSON ``lines``, durably, never over an existing file."""
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    body = "\n".join([VERSION, *lines])
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, os.path.join(folder, name))  # fails if it exists: a log is written once
    finally:
        os.unlink(tmp)
    fsync_path(folder, directory=True)


def _existing(table: str, in_progress: set[str]) -> Iterator[str]:
    """The table's data files (as a reader lists them), but those of batches in progress."""
    for dirpath, dirnames, filenames in os.walk(table):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(("_", ".")))
        for name in sorted(filenames):
            if name.startswith(("_", ".")):
                continue
            if any(name.startswith(f"part-{b}-") for b in in_progress):
                continue
            yield os.path.join(dirpath, name)


@contextlib.contextmanager
def _locked(table: str) -> Iterator[None]:
    os.makedirs(table, exist_ok=True)
    fd = os.open(os.path.join(table, f"{METADATA}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _names(table: str) -> list[str]:
    try:
        return os.listdir(os.path.join(table, METADATA))
    except FileNotFoundError:
        return []


def _id_of(name: str) -> int | None:
    stem = name[: -len(".compact")] if name.endswith(".compact") else name
    return int(stem) if stem.isdigit() else None


def _is_compaction(log_id: int) -> bool:
    return (log_id + 1) % COMPACT_INTERVAL == 0


__all__ = ["COMPACT_INTERVAL", "METADATA", "append", "latest_id"]
