"""Staging directories and the atomic publish of a batch's files into the dataset.

Layout under the output path (Spark and pyarrow readers skip ``_``-prefixed entries)::

    <output>/_staging/<batch>/in/    the batch as pyarrow wrote it (Spark's input)
    <output>/_staging/<batch>/out/   Spark's output for the batch
    <output>/<table>/<col>=<v>/part-<batch>-....<ext>   published files (RDSS: table = valid|invalid|error)

Publishing is a rename per file: same file system, atomic, and idempotent (a file
already moved is simply no longer in the staging directory), so a publish cut short
by a crash is finished by running it again.
"""

from __future__ import annotations

import os
import shutil

from etlstage_workers.spark.extract import TABLE

from etlstage.state.durable import fsync_path

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
    """Move the batch's staged files into the dataset; return how many were moved now."""
    out_dir = os.path.join(batch_dir(output, batch), "out")
    if not os.path.isdir(out_dir):
        return 0
    touched: set[str] = set()
    files = _data_files(out_dir)
    for rel, name in files:
        dest = published_path(output, batch, rel, name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        os.replace(os.path.join(out_dir, rel, name), dest)
        touched.add(os.path.dirname(dest))
        _crash_point("mid-publish")
    for directory in sorted(touched):
        fsync_path(directory, directory=True)
    return len(files)


def remove(output: str, batch: str) -> None:
    shutil.rmtree(batch_dir(output, batch), ignore_errors=True)


def leftovers(output: str, prefix: str) -> list[str]:
    """Staging directories of batches whose id starts with ``prefix`` (this instance's)."""
    root = staging_root(output)
    if not os.path.isdir(root):
        return []
    return sorted(d for d in os.listdir(root) if d.startswith(prefix))


def _crash_point(name: str) -> None:
    """Tests only: ``ETLSTAGE_SPARK_LOAD_CRASH=<point>`` SIGKILLs the loader at that point."""
    if os.environ.get("ETLSTAGE_SPARK_LOAD_CRASH") == name:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


crash_point = _crash_point
