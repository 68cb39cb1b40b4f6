"""Starting Spark for the loader: the project's start-up checks, plus the loader's settings.

The loader starts its session when its first batch comes (:class:`LazySession`), never
before ``setup()``: by then the SDK has pointed file descriptor 1 at stderr, so the JVM
that Spark launches inherits a harmless stdout.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

from etlstage.sparkapi import SparkStartError, check_java, check_master_reachable
from etlstage.sparkapi import start_session as _start_session

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
    on_jvm: Callable[[], None] = lambda: None,
) -> SparkSession:
    """The loader's one SparkSession, for its whole life. ``plain_files``: the loader
    publishes files itself (:data:`LOADER_CONF` applies); Delta tables keep Hadoop's own
    file systems (S3A's upload buffers need the checksummed local one)."""
    if plain_files and not master.startswith("sc://"):  # Spark Connect sessions take the client's settings only
        conf = {**LOADER_CONF, **conf}
    return _start_session(master, app_name, conf, connect_timeout=connect_timeout, log_level=log_level, on_jvm=on_jvm)


class LazySession:
    """The loader's Spark session, started only when a batch needs it: a run with nothing to
    load starts no JVM.  :meth:`begin` starts it on a thread of its own (the batch is parsed
    meanwhile); :meth:`get` waits for it.  A start that failed raises its error to every
    caller (the batch's future, hence the worker's exit status)."""

    def __init__(self, start: Callable[[], SparkSession], given: SparkSession | None = None) -> None:
        self._start = start
        self._lock = threading.Lock()
        self._future: Future[SparkSession] | None = None
        if given is not None:
            self._future = Future()
            self._future.set_result(given)

    @property
    def begun(self) -> bool:
        return self._future is not None

    def begin(self) -> None:
        with self._lock:
            if self._future is not None:
                return
            self._future = Future()
        threading.Thread(target=self._run, name="spark-start", daemon=True).start()

    def _run(self) -> None:
        assert self._future is not None
        try:
            self._future.set_result(self._start())
        except BaseException as exc:  # delivered to whoever waits for the session
            self._future.set_exception(exc)

    def get(self) -> SparkSession:
        self.begin()
        assert self._future is not None
        return self._future.result()

    def started(self) -> SparkSession | None:
        """The session if one was begun and has started (waiting for a start under way); else None."""
        if self._future is None:
            return None
        try:
            return self._future.result()
        except BaseException:
            return None


__all__ = ["LazySession", "SparkStartError", "check_java", "check_master_reachable", "start_session"]
