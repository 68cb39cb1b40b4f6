"""Starting Spark for the loader: the project's start-up checks, plus the loader's settings.

Call :func:`start_session` from ``setup()``: by then the SDK has pointed file
descriptor 1 at stderr, so the JVM that Spark launches inherits a harmless stdout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from etlstage.spark.session import SparkStartError, check_java, check_master_reachable
from etlstage.spark.session import start_session as _start_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOADER_CONF = {
    # Publishing moves data files only; no _SUCCESS marker is needed per staged batch.
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    # file:// without Hadoop's .crc side files: half the files per batch to create, rename
    # and delete; the loader fsyncs the data files itself before it publishes them.
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
}


def start_session(
    master: str,
    app_name: str,
    conf: dict[str, str],
    *,
    connect_timeout: float,
    log_level: str,
    plain_files: bool = True,
) -> SparkSession:
    """The loader's one SparkSession, for its whole life. ``plain_files``: the loader
    publishes files itself (:data:`LOADER_CONF` applies); Delta tables keep Hadoop's own
    file systems (S3A's upload buffers need the checksummed local one)."""
    if plain_files and not master.startswith("sc://"):  # Spark Connect sessions take the client's settings only
        conf = {**LOADER_CONF, **conf}
    return _start_session(master, app_name, conf, connect_timeout=connect_timeout, log_level=log_level)


__all__ = ["SparkStartError", "check_java", "check_master_reachable", "start_session"]
