"""Delta Lake tables: each batch committed by the table's own transaction, once, by key.

Both engines call :func:`commit_batch`: the worker (:mod:`loader`) for each batch the
supervisor sends, the Spark engine's native sink (:mod:`native_sink`) for each micro-batch.
One batch is, per table (RDSS: ``valid``, ``invalid``, ``error`` under the output; else the
output itself)::

    MERGE INTO delta.`<table>` t USING <batch> s ON t._key = s._key
    WHEN NOT MATCHED THEN INSERT *

one Delta commit: readers (Spark, delta-rs, duckdb, polars) see all of the batch's rows
of that table or none. ``_key`` is the row's ``--key`` (the RDSS messageId; the content
hash of the message without one), so a batch sent again — after a crash, by the other
engine, by another instance or machine — inserts nothing: the dedupe record is the table
itself, wherever it lives (a path, ``s3a://``, any Hadoop file system).

Where a batch has a durable identity the commit also carries Delta's idempotent-write pair
``(txnAppId, txnVersion)``, so a replayed batch is skipped by Delta before any join: the
Spark engine's micro-batch id (the query's id, version the micro-batch's number, kept in
its checkpoint) and, under the supervisor, the batch id of a stage with ``batch_id: true``
(application ``etlstage-batch-<id>``, version 0: the id is the same whenever the same
messages are sent again, never for other messages). Without one the MERGE alone makes a
resent batch a no-op (see docs/workers/spark.md, "Delta tables").
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from etlstage_workers.spark.config import LoaderConfig
from etlstage_workers.spark.extract import TABLE, Prepared
from etlstage_workers.spark.writer import shape

from etlstage.sparkapi import is_connect

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("etlstage.spark")

KEY = "_key"  # the dedupe key column of every Delta table the loader writes
DELTA_SESSION = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # A table's state is rebuilt with this many tasks (Delta's default 50 is for clusters
    # reading huge logs: here it is most of a small batch's fixed cost).
    "spark.databricks.delta.snapshotPartitions": "2",
    # Each commit under an idempotent-write pair keeps its application id in the table's
    # state; the supervisor's batch ids are one application each, so tables this session
    # creates drop a pair after a week (at a checkpoint). A batch sent again later than that
    # is merged by key as before: nothing is loaded twice either way.
    "spark.databricks.delta.properties.defaults.setTransactionRetentionDuration": "interval 7 days",
}
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
CONFLICT_RETRIES = 5  # a MERGE that lost a race with another writer's commit is run again


@dataclass(frozen=True)
class Txn:
    """Delta's idempotent-write pair: a commit of ``version`` or below by ``app_id`` is skipped."""

    app_id: str
    version: int


def is_uri(output: str) -> bool:
    """``s3a://bucket/x``, ``hdfs://…``, ``file:///…``: a Hadoop file system URI, not a local path."""
    return "://" in output


def package_sets(config: LoaderConfig) -> list[str]:
    """The jar sets (:data:`etlstage.sparkapi.PACKAGES`) this loader's session needs."""
    sets = ["delta"] if config.format == "delta" else []
    if config.output.startswith(("s3a://", "s3://")):
        sets.append("s3")
    if config.log_table:
        sets.append("delta-dynamodb")
    return sets


def session_conf(config: LoaderConfig) -> dict[str, str]:
    """Spark settings the loader's tables need at session start: the jars (fetched once into
    the cache, :func:`etlstage.sparkapi.fetch_named`), Delta's SQL extension and catalog, and with
    ``--dynamodb-log-table`` Delta's DynamoDB log store."""
    from etlstage.sparkapi import PACKAGES, JarFetchError, SparkStartError, fetch_named, given_by

    # a set the user's --conf spark.jars / spark.jars.packages brings is theirs: not fetched
    sets = [name for name in package_sets(config) if not given_by(config.conf, PACKAGES[name]())]
    try:
        jars = [str(jar) for name in sets for jar in fetch_named(name)]
    except JarFetchError as exc:
        raise SparkStartError(f"the jars of --format {config.format} / --output {config.output}: {exc}") from None
    conf = {"spark.jars": ",".join(jars)} if jars else {}
    if config.format == "delta":
        conf.update(DELTA_SESSION)
    conf.update(config.log_store_conf())
    return conf


def table_path(output: str, route: str | None) -> str:
    """Where a route's table lives: ``<output>/<route>`` (RDSS), else the output."""
    return f"{output.rstrip('/')}/{route}" if route else output


def batch_tables(prepared: Prepared, positions: list[int]) -> dict[str | None, pa.Table]:
    """The batch's rows at ``positions`` with their ``_key``, by table (RDSS route; else None)."""
    table = prepared.table if len(positions) == prepared.table.num_rows else prepared.take(positions)
    table = table.append_column(KEY, pa.array([prepared.keys[p] for p in positions], pa.string()))
    if prepared.routes is None:
        return {None: table}
    routes = table.column(TABLE)
    out: dict[str | None, pa.Table] = {}
    for route in sorted(set(prepared.routes[p] for p in positions)):
        out[route] = table.filter(pc.equal(routes, route)).drop_columns([TABLE])
    return out


def commit_batch(
    spark: SparkSession,
    config: LoaderConfig,
    output: str,
    prepared: Prepared,
    positions: list[int],
    txn: Txn | None = None,
    lap: Callable[[str], None] = lambda _: None,
) -> dict[str, int]:
    """Merge the batch's rows (first occurrence of each key: ``positions``) into its tables
    under ``output``; return the rows inserted per table (RDSS) and in all (``total``).
    Durable when this returns.

    The tables are merged at the same time, each in a session of its own: a MERGE is
    mostly the driver waiting (log reads, planning, small jobs, the commit), so the three
    RDSS tables take little longer than one; the session keeps each thread's temp view
    and idempotent-write pair apart. (Through Spark Connect, one after the other.)"""
    tables = batch_tables(prepared, positions)
    # Spark Connect has no newSession(): there the tables are merged one after the other
    at_once = len(tables) > 1 and not is_connect(spark)
    staging = tempfile.TemporaryDirectory(prefix="etlstage-merge-") if reads_local_files(spark) else None
    folder = staging.name if staging is not None else None

    def one(route: str | None, rows: pa.Table) -> int:
        session = spark.newSession() if at_once else spark
        df = shape(source(session, rows, folder, route), config, prepared.parsed, keep=(KEY,), routed=False)
        return merge(session, df, rows.num_rows, table_path(output, route), config.partition_by, txn)

    # leaving the block waits for every MERGE, so none is still running when a failure is raised
    with (
        staging or contextlib.nullcontext(),
        ThreadPoolExecutor(max_workers=len(tables) if at_once else 1, thread_name_prefix="delta-merge") as pool,
    ):
        futures = {route: pool.submit(one, route, rows) for route, rows in tables.items()}
    counts = {"total": 0}
    for route, future in futures.items():
        inserted = future.result()
        counts["total"] += inserted
        if route is not None:
            counts[route] = inserted
    lap("merge")
    return counts


def reads_local_files(spark: SparkSession) -> bool:
    """Spark's tasks run in this machine's JVM (a ``local`` master): they read its files."""
    return not is_connect(spark) and str(spark.sparkContext.master).startswith("local")


def source(spark: SparkSession, rows: pa.Table, staging: str | None, route: str | None) -> DataFrame:
    """The batch's rows of one table as a DataFrame.  With ``staging`` (a folder Spark's
    tasks read: :func:`reads_local_files`), through a Parquet file there: Spark's
    ``createDataFrame`` makes a partition of the Arrow data itself, so the task that reads
    it carries the rows (Spark's "task of very large size" warning at 1 MB: a 5,000-message
    batch made one of 3–6 MB, serialized into the MERGE's first job); a task that reads a
    file carries its name.  Without (a cluster's executors, Spark Connect): createDataFrame."""
    if staging is None:
        return spark.createDataFrame(rows)
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import from_arrow_schema

    path = os.path.join(staging, f"{route or 'rows'}.parquet")
    pq.write_table(rows, path, compression="none")  # read once, at once: not worth compressing
    # given the schema, Spark reads no footer to infer it (a Spark job per table without)
    return spark.read.schema(from_arrow_schema(rows.schema)).parquet(path)


def merge(
    spark: SparkSession, df: DataFrame, rows: int, path: str, partition_by: tuple[str, ...], txn: Txn | None
) -> int:
    """``df``'s rows whose ``_key`` the table at ``path`` lacks, in one commit; the number
    inserted. With ``txn``, a commit that ``txn`` already made is skipped (0 inserted).

    ``df`` holds ``rows`` rows (the caller knows: a count would be a Spark job) with
    distinct keys (the batch's first occurrences). Where no table is there yet,
    the batch itself creates it: an insert into nothing needs no join, and a cold MERGE is
    most of a first batch's cost. The creation is version 0 of the table's log, which only
    one writer can put: a writer that loses that race, or finds the table made since it
    looked, merges instead."""
    if path not in _TABLES:
        created = _create_with(spark, df, path, partition_by, txn)
        _TABLES.add(path)
        if created:
            return rows
    view = f"etlstage_batch_{abs(hash((path, time.monotonic_ns())))}"
    df.createOrReplaceTempView(view)
    quoted = path.replace("`", "``")
    statement = (
        f"MERGE INTO delta.`{quoted}` AS t USING {view} AS s ON t.{KEY} = s.{KEY} WHEN NOT MATCHED THEN INSERT *"
    )
    try:
        for attempt in range(1, CONFLICT_RETRIES + 1):
            try:
                with _pair(spark, txn):
                    return _inserted(spark.sql(statement))
            except Exception as exc:
                if attempt == CONFLICT_RETRIES or not _is_conflict(exc):
                    raise
                log.info("%s: a concurrent commit won (%s); merging again", path, type(exc).__name__)
    finally:
        spark.catalog.dropTempView(view)
    raise AssertionError("unreachable")  # the last attempt returns or raises


@contextmanager
def _pair(spark: SparkSession, txn: Txn | None) -> Iterator[None]:
    """The session's next Delta commit carries ``txn`` (none: no pair)."""
    if txn is None:
        yield
        return
    spark.conf.set(TXN_APP_ID, txn.app_id)
    spark.conf.set(TXN_VERSION, str(txn.version))
    try:
        yield
    finally:
        spark.conf.unset(TXN_APP_ID)
        spark.conf.unset(TXN_VERSION)


def _inserted(result: DataFrame) -> int:
    """The MERGE's own count of inserted rows (none when Delta skipped it as a replay)."""
    rows = result.collect()
    if not rows or "num_inserted_rows" not in rows[0].asDict():
        return 0
    return int(rows[0]["num_inserted_rows"])


_TABLES: set[str] = set()  # tables this process has seen exist: not checked again


def _create_with(spark: SparkSession, df: DataFrame, path: str, partition_by: tuple[str, ...], txn: Txn | None) -> bool:
    """Create the table at ``path`` holding ``df``'s rows; False when a table is already
    there (made by anyone, before or during this call): then the batch must be merged."""
    if _exists(spark, path):
        return False
    # "error" (errorifexists; Spark Connect knows only this name), not "append": an
    # append to a table created after the look above would be a blind append, which no
    # conflict check stops (duplicates).
    writer = df.write.format("delta").mode("error")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    try:
        with _pair(spark, txn):
            writer.save(path)
    except Exception:
        if _exists(spark, path):  # another writer's version 0 won: merge into it
            log.info("%s: created by another writer meanwhile; merging", path)
            return False
        raise
    return True


def _exists(spark: SparkSession, path: str) -> bool:
    try:
        spark.read.format("delta").load(path).schema  # noqa: B018 - raises when there is no table
    except Exception:
        return False
    return True


def _is_conflict(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}"
    return any(word in text for word in ("Concurrent", "DELTA_CONCURRENT", "ProtocolChanged", "MetadataChanged"))


__all__ = ["KEY", "Txn", "commit_batch", "is_uri", "package_sets", "session_conf", "table_path"]
