"""Staging directories and the atomic publish of a batch's files into the dataset.

Layout under the output path (Spark and pyarrow readers skip ``_``-prefixed entries)::

    <output>/_staging/<batch>/in/    the batch as pyarrow wrote it (Spark's input)
    <output>/_staging/<batch>/out/   Spark's output for the batch
    <output>/<table>/<col>=<v>/part-<batch>-....<ext>   published files (RDSS: table = valid|invalid|error)

Publishing is a rename per file: same file system, atomic, and idempotent (a file
already moved is simply no longer in the staging directory), so a publish cut short
by a crash is finished by running it again. Then each table's ``_spark_metadata`` log
names the batch's files in one step (:mod:`.table_log`): Spark's readers see a batch
whole or not at all.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, cast

from etlstage_workers import crashpoint
from etlstage_workers.spark import table_log
from etlstage_workers.spark.extract import TABLE

from etlstage.worker.durable import fsync_path, write_durably

STAGING = "_staging"


def staging_root(output: str) -> str:
    return os.path.join(output, STAGING)


def batch_dir(output: str, batch: str) -> str:
    return os.path.join(output, STAGING, batch)


def _data_files(root: str) -> list[tuple[str, str]]:
    """(directory relative to ``root``, file name) of every data file Spark wrote."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(("_temporary", ".")))
        rel = os.path.relpath(dirpath, root)
        for name in sorted(filenames):
            if not name.startswith(("_", ".")):
                found.append(("" if rel == "." else rel, name))
    return found


def sync_staged(out_dir: str) -> int:
    """Flush Spark's staged files to disk (Hadoop's local writer does not); return their number."""
    files = _data_files(out_dir)
    for rel, name in files:
        fsync_path(os.path.join(out_dir, rel, name))
    return len(files)


def published_path(output: str, batch: str, rel: str, name: str) -> str:
    parts = rel.split(os.sep) if rel else []
    if parts and parts[0].startswith(TABLE + "="):
        parts[0] = parts[0][len(TABLE) + 1 :]  # __table=valid -> valid
    new_name = f"part-{batch}-{name[5:]}" if name.startswith("part-") else f"part-{batch}-{name}"
    return os.path.join(output, *parts, new_name)


def publish(output: str, batch: str) -> int:
    """Move the batch's staged files into the dataset, then log them in each table's
    ``_spark_metadata`` (:mod:`.table_log`); return how many files were moved now.

    The plan (every file's destination, each table's last log id) is written to the
    staging directory first, so that a publish run again after a crash finishes the same
    moves and logs each table's part of the batch once."""
    out_dir = os.path.join(batch_dir(output, batch), "out")
    if not os.path.isdir(out_dir):
        return 0
    plan = _plan(output, batch, out_dir)
    touched: set[str] = set()
    moved = 0
    for src, dest in plan["moves"]:
        if os.path.exists(src):  # else moved before a crash
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            os.replace(src, dest)
            moved += 1
            crash_point("mid-publish")
        touched.add(os.path.dirname(dest))
    for directory in sorted(touched):
        fsync_path(directory, directory=True)
    busy = set(leftovers(output, "")) - {batch}  # batches being published meanwhile
    for table, since in plan["tables"].items():
        files = [dest for _, dest in plan["moves"] if dest.startswith(table + os.sep)]
        table_log.append(table, files, batch, since, busy)
        crash_point("mid-log")
    return moved


def _plan(output: str, batch: str, out_dir: str) -> dict[str, Any]:
    path = os.path.join(batch_dir(output, batch), "publish.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return cast("dict[str, Any]", json.load(f))
    files = _data_files(out_dir)
    moves = [(os.path.join(out_dir, rel, name), published_path(output, batch, rel, name)) for rel, name in files]
    tables = {table_of(output, rel) for rel, _ in files}
    plan = {"moves": moves, "tables": {t: table_log.latest_id(t) for t in sorted(tables)}}
    write_durably(path, json.dumps(plan).encode())
    return plan


def table_of(output: str, rel: str) -> str:
    """The table a staged file (in folder ``rel``) goes to: ``<output>/<table>`` when routed
    (RDSS: valid, invalid, error), else the output itself."""
    first = rel.split(os.sep)[0] if rel else ""
    return os.path.join(output, first[len(TABLE) + 1 :]) if first.startswith(TABLE + "=") else output


def remove(output: str, batch: str) -> None:
    shutil.rmtree(batch_dir(output, batch), ignore_errors=True)


def leftovers(output: str, prefix: str) -> list[str]:
    """Staging directories of batches whose id starts with ``prefix`` (this instance's)."""
    root = staging_root(output)
    if not os.path.isdir(root):
        return []
    return sorted(d for d in os.listdir(root) if d.startswith(prefix))


def crash_point(name: str) -> None:
    """Tests only: ``ETLSTAGE_SPARK_LOAD_CRASH=<point>`` SIGKILLs the loader at that point."""
    crashpoint.crash_point("ETLSTAGE_SPARK_LOAD_CRASH", name)
