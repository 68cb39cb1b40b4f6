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
Through Spark Connect (no SparkContext on the client) the copies are the session's
artifacts (``addArtifacts``), named with the run's tag.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

from etlstage.errors import ConfigError
from etlstage.spark.checkpoint import private_folder

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("etlstage.spark")

Shipped = tuple[tuple[str, str], ...]  # (path on the driver, name of its copy for SparkFiles.get)


def ship(spark: SparkSession, paths: list[str], packs: Path, tag: str = "") -> Shipped:
    """Add ``paths`` to the context (folders packed under ``packs``); what tasks resolve.

    Through Spark Connect the copies are the session's artifacts, which some tasks find
    in a folder of the session beside the context's: their names then carry ``tag`` (the
    run) so that no other session's copy of a same-named file is taken for them.
    """
    from etlstage.spark.setup.spark_session import is_connect

    connect = is_connect(spark)
    prefix = f"{tag}-" if connect and tag else ""
    shipped = []
    for path in paths:
        root = os.path.normpath(os.path.abspath(path))
        try:
            if os.path.isdir(root):
                private_folder(packs)
                archive = packs / f"{prefix}{os.path.basename(root)}.tgz"
                with tarfile.open(archive, "w:gz") as tar:
                    tar.add(root, arcname=".")
                _add(spark, str(archive), archive=True, connect=connect)
                shipped.append((root, archive.name))
            else:
                copy = root
                if prefix:
                    private_folder(packs)
                    copy = str(packs / f"{prefix}{os.path.basename(root)}")
                    shutil.copy2(root, copy)
                _add(spark, copy, archive=False, connect=connect)
                shipped.append((root, os.path.basename(copy)))
        except Exception as exc:  # gone since it was checked, unreadable, or refused by Spark
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError([f"engine.ship: cannot ship {path} to the executors: {first[:300]}"]) from None
    if shipped:
        log.info("shipping to the executors: %s", ", ".join(paths))
    return tuple(shipped)


def _add(spark: SparkSession, path: str, *, archive: bool, connect: bool) -> None:
    """A file (or an archive, unpacked) for every executor: the context's, or through Spark
    Connect the session's artifacts (a Connect client has no SparkContext)."""
    if connect:
        spark.addArtifacts(path, archive=archive, file=not archive)
    elif archive:
        spark.sparkContext.addArchive(path)
    else:
        spark.sparkContext.addFile(path)


def copy_of(name: str) -> str:
    """This executor's copy of the shipped ``name``: in the files' folder, or — a Spark
    Connect session's artifact, seen from a task whose folder is the context's — in the
    session's folder inside it."""
    from pyspark import SparkFiles

    path = SparkFiles.get(name)
    if os.path.exists(path):
        return path
    # A streaming query runs in a clone of the session, with its own copy of the artifacts:
    # the run's tag in the name makes every match the same file.
    found = sorted(glob.glob(os.path.join(glob.escape(SparkFiles.getRootDirectory()), "*", glob.escape(name))))
    return found[0] if found else path


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
                arg = copy_of(name) + where[len(root) :]
                break
        out.append(arg)
    return out, cwd if os.path.isdir(cwd) else SparkFiles.getRootDirectory()


__all__ = ["Shipped", "copy_of", "in_task", "localize", "ship"]
