"""One batch through Spark: its rows staged as Parquet, the tables written by Spark into the
batch's staging directory and synced to disk (publishing them is :mod:`publish`'s job).
The worker (:mod:`loader`) and the engine's native sink (:mod:`native_sink`) both use it."""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow.parquet as pq
from etlstage_workers.spark import publish as pub
from etlstage_workers.spark.config import LoaderConfig
from etlstage_workers.spark.extract import Prepared
from etlstage_workers.spark.writer import unique_columns, write_batch

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Rows below which a batch is written by one Spark task: a task's fixed cost (scheduling,
# one file per table) outweighs splitting so few rows across cores.
ROWS_PER_TASK = 10_000


def stage_input(output: str, batch: str, prepared: Prepared, positions: list[int], parallelism: int) -> None:
    """The rows at ``positions`` as the batch's Spark input (one row group per task)."""
    in_dir = os.path.join(pub.batch_dir(output, batch), "in")
    os.makedirs(in_dir, exist_ok=True)
    table = prepared.table if len(positions) == prepared.table.num_rows else prepared.take(positions)
    tasks = max(1, min(parallelism, table.num_rows // ROWS_PER_TASK))
    rows_per_group = max(1, math.ceil(table.num_rows / tasks))
    path = os.path.join(in_dir, "batch.parquet")
    pq.write_table(table, path, row_group_size=rows_per_group, compression="none")


def write_staged(
    spark: SparkSession,
    config: LoaderConfig,
    output: str,
    batch: str,
    prepared: Prepared,
    positions: list[int],
    lap: Callable[[str], None] = lambda _: None,
) -> dict[str, int]:
    """Spark writes the staged input's tables; synced to disk; rows per table (and total)."""
    directory = pub.batch_dir(output, batch)
    in_dir, out_dir = os.path.join(directory, "in"), os.path.join(directory, "out")
    pub.crash_point("staged-input")
    plain = unique_columns(prepared.table) if prepared.parsed else []
    schema = prepared.table.schema
    write_batch(spark, config, "file://" + in_dir, "file://" + out_dir, prepared.parsed, plain, schema)
    lap("spark")
    pub.sync_staged(out_dir)
    lap("fsync")
    counts = {"total": len(positions)}
    if prepared.routes is not None:
        counts.update(Counter(prepared.routes[p] for p in positions))
    return counts


__all__ = ["ROWS_PER_TASK", "stage_input", "write_staged"]
