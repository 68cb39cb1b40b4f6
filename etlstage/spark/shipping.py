"""Workers shipped to the executors: ``engine.ship`` for clusters without a shared mount.

Before the query starts, every file listed is added to the Spark context
(``SparkContext.addFile``) and every folder packed into a ``.tgz`` under the checkpoint
and added as an archive (``addArchive``: Spark unpacks it, file modes kept) — Spark
refuses local folders on a cluster.  Executors fetch them into their work directories.
In a task, every argument of a stage's command that names a shipped path — as written,
relative to the pipeline file's folder like the ``ship`` entries, or absolute — or a
path inside a shipped folder is replaced by the executor's copy (``SparkFiles.get``).  A
working directory the executor does not have becomes the folder of the copies.  On the
driver (the extractors that run there) paths stay as they are: they are the originals.
"""

from __future__ import annotations

import logging
import os
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

from etlstage.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("etlstage.spark")

Shipped = tuple[tuple[str, str], ...]  # (path on the driver, name of its copy for SparkFiles.get)


def ship(spark: SparkSession, paths: list[str], packs: Path) -> Shipped:
    """Add ``paths`` to the context (folders packed under ``packs``); what tasks resolve."""
    shipped = []
    for path in paths:
        root = os.path.normpath(os.path.abspath(path))
        try:
            if os.path.isdir(root):
                packs.mkdir(parents=True, exist_ok=True)
                archive = packs / f"{os.path.basename(root)}.tgz"
                with tarfile.open(archive, "w:gz") as tar:
                    tar.add(root, arcname=".")
                spark.sparkContext.addArchive(str(archive))
                shipped.append((root, archive.name))
            else:
                spark.sparkContext.addFile(root)
                shipped.append((root, os.path.basename(root)))
        except Exception as exc:  # gone since it was checked, unreadable, or refused by Spark
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError([f"engine.ship: cannot ship {path} to the executors: {first[:300]}"]) from None
    if shipped:
        log.info("shipping to the executors: %s", ", ".join(paths))
    return tuple(shipped)


def in_task() -> bool:
    from pyspark import TaskContext

    return TaskContext.get() is not None


def localize(argv: list[str], cwd: str, base_dir: str, shipped: Shipped) -> tuple[list[str], str]:
    """``(argv, cwd)`` as a task runs them: shipped paths replaced by this executor's copies."""
    if not shipped or not in_task():
        return argv, cwd
    from pyspark import SparkFiles

    out = []
    for arg in argv:
        where = os.path.normpath(os.path.join(base_dir, arg))  # an absolute arg stays itself
        for root, name in shipped:
            if where == root or where.startswith(root + os.sep):
                arg = SparkFiles.get(name) + where[len(root) :]
                break
        out.append(arg)
    return out, cwd if os.path.isdir(cwd) else SparkFiles.getRootDirectory()


__all__ = ["Shipped", "in_task", "localize", "ship"]
